package policy

import "testing"

// stateIndex must agree with stateNames, and the
// MAIL..END-OF-MESSAGE indexes messageRequests adds up.
func TestStateIndexMatchesNames(t *testing.T) {
	for i, n := range stateNames {
		if got := stateIndex(n); got != i {
			t.Errorf("stateIndex(%q) = %d, want %d", n, got, i)
		}
	}
	if stateIndex("rcpt") != -1 || stateIndex("") != -1 {
		t.Error("unknown states must be -1")
	}
	var s stageCounts
	for _, st := range stateNames {
		s.add(1, st)
	}
	if got := s.messageRequests(1); got != 4 {
		t.Errorf("messageRequests counts %d of MAIL, RCPT, DATA, END-OF-MESSAGE, want 4", got)
	}
}
