package quarantine

import (
	"errors"
	"strings"
	"testing"
)

func TestValidQueueID(t *testing.T) {
	good := []string{
		"4F2A12345",               // Postfix short, 9 hex digits
		"A1B2C3D4E5F6",            // Postfix short, 12
		"3C8F1A",                  // Postfix short, the shortest
		"4LR5tD6VBnzKHk",          // Postfix long
		"4Xz9Nq1c2Gz3Nbx",         // Postfix long whose time part has a 'z'
		"1rYd5N-0003kT-Qw",        // Exim classic
		"1rYd5N-0000000003k-Qw8A", // Exim 4.97+
	}
	bad := []string{
		"", "ALL", "-", "-d", "--", "deferred", "4F2a12345", "3C8F1", "4F2A 12345", "4F2A12345\n",
		"4F2A12345;rm", "$(reboot)", "`id`", "../../etc", "4LR5tD6VBnz", "4LR5tDVBnzKH", // long: inode empty; time part too short
		"4LR5tD6VBnzKHa", // 'a' is a vowel: not in Postfix's alphabet
		"1rYd5N-0003kT-Q", "1rYd5N_0003kT-Qw", "1rYd5N-0003kT-Q!", "\x1b[2J4F2A1",
		strings.Repeat("A", 33), "4F2A12345\x00",
	}
	for _, id := range good {
		if !ValidQueueID(id) {
			t.Errorf("ValidQueueID(%q) = false, want true", id)
		}
	}
	for _, id := range bad {
		if ValidQueueID(id) {
			t.Errorf("ValidQueueID(%q) = true, want false", id)
		}
	}
}

// TestStoreRefusesInvalidQueueID: a queue ID a client made up ("ALL")
// never reaches the store, whichever way it comes.
func TestStoreRefusesInvalidQueueID(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	if _, err := hold(s, &Entry{Key: "mallory", QueueID: "ALL"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Hold with queue ID ALL: %v, want ErrInvalid", err)
	}
	if _, err := freeze(s, &Entry{Key: "mallory", QueueID: "-"}, []byte("Subject: x\r\n\r\nx\r\n")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Freeze with queue ID -: %v, want ErrInvalid", err)
	}
	if _, err := hold(s, &Entry{Key: "mallory", Instance: "i1"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.RecordHold(&Entry{Instance: "i1", QueueID: "ALL"}, true); !errors.Is(err, ErrInvalid) || r.ID != "" {
		t.Fatalf("RecordHold(addOnly) ALL: %+v %v, want ErrInvalid", r, err)
	}
	es, err := s.List(Filter{Key: "mallory"})
	if err != nil || len(es) != 1 || es[0].QueueID != "" {
		t.Fatalf("entries after refused queue IDs: %+v %v", es, err)
	}
}

// FuzzValidQueueID checks the validator's promises on any input: an
// accepted ID is short, printable ASCII without option or shell
// syntax, and in one of the three shapes.
func FuzzValidQueueID(f *testing.F) {
	for _, s := range []string{"4F2A12345", "4LR5tD6VBnzKHk", "1rYd5N-0003kT-Qw", "1rYd5N-0000000003k-Qw8A", "ALL", "-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !ValidQueueID(id) {
			return
		}
		if len(id) > maxQueueIDLen || len(id) < 6 || id[0] == '-' || strings.EqualFold(id, "all") {
			t.Fatalf("accepted %q", id)
		}
		for i := 0; i < len(id); i++ {
			if c := id[i]; !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-') {
				t.Fatalf("accepted %q with byte %q", id, c)
			}
		}
		if strings.Contains(id, "-") && len(id) != 16 && len(id) != 23 {
			t.Fatalf("accepted %q: a dash outside an Exim ID", id)
		}
	})
}
