package mtatest

import (
	"errors"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"
)

// TestSinkSetReply drives the sink directly.
func TestSinkSetReply(t *testing.T) {
	t.Parallel()
	sink := StartSink(t)
	mail := Mail{
		From: "a@example.org",
		To:   []string{"b@example.net", "c@example.net"},
		Data: BuildMessage("a@example.org", "b@example.net", "s", "b\n"),
	}
	sink.SetReply(StageRcpt, &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"})
	res := SendResult(t, sink.Addr(), mail)
	if len(res.Errors) != 2 || res.Errors[0].Code() != 451 || res.Errors[1].Rcpt != "c@example.net" {
		t.Fatalf("errors %v, want two 451 at RCPT", res.Err())
	}
	sink.SetReply(StageRcpt, nil)
	sink.SetReply(StageEndOfData, &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "no"})
	var sendErr *SendError
	if err := Send(t, sink.Addr(), mail); !errors.As(err, &sendErr) || sendErr.Stage != StageEndOfData || sendErr.Code() != 554 {
		t.Fatalf("error %v, want 554 at end of data", err)
	}
	sink.SetReply(StageData, nil)
	if err := Send(t, sink.Addr(), mail); err != nil {
		t.Fatal(err)
	}
	if sink.Count() != 1 || sink.Rejected() != 3 {
		t.Errorf("Count %d Rejected %d, want 1 and 3", sink.Count(), sink.Rejected())
	}
	if to := sink.Messages()[0].To; len(to) != 2 {
		t.Errorf("recipients %v", to)
	}
}

func TestBuildMasterCF(t *testing.T) {
	sys := "# comment\n" +
		"smtp      inet  n       -       y       -       -       smtpd\n" +
		"submission inet n       -       y       -       -       smtpd\n" +
		"  -o syslog_name=postfix/submission\n" +
		"pickup    unix  n       -       y       60      1       pickup\n" +
		"  -o content_filter=\n"
	got, err := buildMasterCF(sys, 2525, 2526)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n127.0.0.1:2525 inet n - n - - smtpd\n",
		"\n#mtatest# submission inet",
		"\n#mtatest#   -o syslog_name=postfix/submission\n",
		"\npickup unix n - n 60 1 pickup\n  -o content_filter=\n",
		"\n127.0.0.1:2526 inet n - n - - smtpd\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("master.cf lacks %q:\n%s", want, got)
		}
	}
}

func TestBuildMainCFExtra(t *testing.T) {
	got, err := buildMainCF(PostfixOptions{ExtraMainCF: map[string]string{"biff": "yes", "zz_new": "1", "aa_new": "2"}},
		"/r", "/r/queue", "/r/data", "/r/maillog")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(got, "\nbiff = ") != 1 || !strings.Contains(got, "\nbiff = yes\n") ||
		!strings.HasSuffix(got, "\naa_new = 2\nzz_new = 1\n") {
		t.Errorf("ExtraMainCF not set over the harness's, new names sorted at the end:\n%s", got)
	}
	if _, err := buildMainCF(PostfixOptions{ExtraMainCF: map[string]string{"smtpd_banner": "x"}}, "/r", "/r/q", "/r/d", "/r/l"); err == nil {
		t.Error("ExtraMainCF may set smtpd_banner")
	}
}
