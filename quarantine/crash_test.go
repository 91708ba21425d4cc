package quarantine

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// crashEnv names the database a re-executed test binary freezes into
// until it is killed (see TestCrashSafety).
const crashEnv = "QUARANTINE_CRASH_CHILD_DB"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		os.Exit(crashChild(path))
	}
	os.Exit(m.Run())
}

// crashChild freezes messages of 1 KiB to 256 KiB (every 8th up to 4 MiB) into path, thawing and
// deleting some, forever, reporting each committed operation on stdout
// (one write(2) per line, so a line is either wholly out or not at all).
func crashChild(path string) int {
	db, err := statedb.Open(path, false, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := New(db, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Stdout.WriteString("ready\n")
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	var frozen []string
	for i := 0; ; i++ {
		size := 1<<10 + r.IntN(256<<10)
		if i%8 == 7 {
			size = 1<<10 + r.IntN(4<<20)
		}
		msg := make([]byte, size)
		for j := 0; j < len(msg); j += 8 {
			v := r.Uint64()
			for k := j; k < min(j+8, len(msg)); k++ {
				msg[k] = 'a' + byte(v%26)
				v >>= 5
			}
		}
		copy(msg, fmt.Sprintf("Subject: crash %d\r\n\r\n", i))
		id, err := freeze(s, &Entry{Key: "crash", Instance: fmt.Sprintf("inst.%d", i%3)}, msg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "freeze:", err)
			return 3
		}
		os.Stdout.WriteString("committed " + id + "\n")
		frozen = append(frozen, id)
		switch i % 5 {
		case 2:
			id, frozen = frozen[0], frozen[1:]
			if err := s.MarkThawed(id, "", ""); err != nil {
				fmt.Fprintln(os.Stderr, "thaw:", err)
				return 3
			}
			os.Stdout.WriteString("thawed " + id + "\n")
		case 4:
			id, frozen = frozen[0], frozen[1:]
			if err := s.Delete(id); err != nil {
				fmt.Fprintln(os.Stderr, "delete:", err)
				return 3
			}
			os.Stdout.WriteString("deleted " + id + "\n")
		}
	}
}

// TestCrashSafety SIGKILLs a process that is freezing messages at random
// moments and checks after each kill that the file is consistent, that no
// message is half-stored (every stored message matches its SHA-256) and
// that every freeze the process reported as committed is there.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	want := map[string]State{} // ID -> state the child reported
	for round := range 5 {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			br := bufio.NewReader(out)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return // a partial last line is not a report
				}
				lines <- strings.TrimSuffix(line, "\n")
			}
		}()
		select {
		case l := <-lines:
			if l != "ready" {
				t.Fatalf("round %d: child said %q", round, l)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child not ready; stderr: %s", round, stderr.String())
		}
		kill := time.After(time.Duration(50+r.IntN(251)) * time.Millisecond)
		killed := false
		n := 0
	read:
		for {
			select {
			case <-kill:
				if err := cmd.Process.Kill(); err != nil { // SIGKILL
					t.Fatal(err)
				}
				killed = true
			case l, ok := <-lines:
				if !ok {
					break read
				}
				op, id, _ := strings.Cut(l, " ")
				switch op {
				case "committed":
					want[id] = Frozen
					n++
				case "thawed":
					want[id] = Thawed
				case "deleted":
					want[id] = Deleted
				default:
					t.Errorf("child said %q", l)
				}
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: child exited by itself: %v; stderr: %s", round, err, stderr.String())
		}
		t.Logf("round %d: %d freezes reported before SIGKILL", round, n)
		verifyCrashDB(t, path, want)
	}
	if len(want) == 0 {
		t.Error("no freeze committed in any round")
	}
}

func verifyCrashDB(t *testing.T, path string, want map[string]State) {
	t.Helper()
	checkFile(t, path)
	s, db := openFile(t, path, true)
	defer db.Close()
	all, err := s.List(Filter{States: []State{Held, Frozen, Thawed, Deleted}})
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]Entry{}
	for _, e := range all {
		found[e.ID] = e
		msg, err := s.Message(e.ID)
		switch {
		case (e.State == Frozen || e.State == Thawed) && err != nil: // thawed: kept until swept
			t.Errorf("%s %s: %v", e.State, e.ID, err)
		case (e.State == Frozen || e.State == Thawed) && int64(len(msg)) != e.Size:
			t.Errorf("%s %s: %d bytes, entry says %d", e.State, e.ID, len(msg), e.Size)
		case e.State == Deleted && !errors.Is(err, ErrNoContent):
			t.Errorf("%s %s: content: %v", e.State, e.ID, err)
		}
	}
	for id, st := range want {
		e, ok := found[id]
		switch {
		case !ok:
			t.Errorf("committed %s missing after crash", id)
		case e.State != st && !(st == Frozen && e.State != Held):
			// A thaw or delete may have committed without being reported.
			t.Errorf("%s is %s, child reported %s", id, e.State, st)
		}
	}
}
