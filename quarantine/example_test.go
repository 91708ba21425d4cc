package quarantine_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/statedb"
)

func Example() {
	dir, err := os.MkdirTemp("", "quarantine-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The quarantine keeps its buckets in the daemon's state file.
	db, err := statedb.Open(filepath.Join(dir, "ratelimitd.db"), false, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	s, err := quarantine.New(db, quarantine.Options{MaxSize: 1 << 30})
	if err != nil {
		log.Fatal(err)
	}

	msg := []byte("From: alice@example.com\r\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n\r\nHello\r\n")
	e := &quarantine.Entry{Limit: "user-hour", Key: "alice", Rate: 240, Max: 200, Sender: "alice@example.com"}
	r, err := s.RecordFreeze(e, bytes.NewReader(msg))
	if err != nil {
		// Not stored: tell the MTA to temp-fail (450), never to discard.
		log.Fatal(err)
	}
	// Committed and fsync'd: the MTA may now discard its copy.

	list, _ := s.List(quarantine.Filter{Key: "alice"})
	fmt.Println(len(list), list[0].State, list[0].Subject)

	// Thaw: re-inject the message (not shown), then record the success.
	if _, err := s.Message(r.ID); err != nil {
		log.Fatal(err)
	}
	if err := s.MarkThawed(r.ID, "", ""); err != nil {
		log.Fatal(err)
	}
	// The message is kept for a repeated thaw until swept.
	if _, err := s.SweepThawed(time.Now()); err != nil {
		log.Fatal(err)
	}
	st, _ := s.Stats()
	fmt.Println(st.Frozen, st.Thawed, st.Bytes)
	// Output:
	// 1 frozen Grüße
	// 0 1 0
}

func ExamplePreviewMessage() {
	msg := []byte("Subject: =?ISO-8859-1?Q?Caf=E9?=\r\n" +
		"Content-Type: text/plain; charset=iso-8859-1\r\n" +
		"Content-Transfer-Encoding: quoted-printable\r\n" +
		"\r\n" +
		"Un caf=E9, s'il vous pla=EEt.\r\n")
	p, err := quarantine.PreviewMessage(context.Background(), msg, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(p)
	// Output:
	// Subject: Café
	// Content-Type: text/plain; charset=iso-8859-1
	// Content-Transfer-Encoding: quoted-printable
	//
	// Parts:
	//   1        text/plain; charset=iso-8859-1 (29 bytes)
	//
	// --- part 1 (text/plain) ---
	// Un café, s'il vous plaît.
}
