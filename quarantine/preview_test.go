package quarantine

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// A multipart/alternative message with a quoted-printable ISO-8859-1
// text/plain part and an HTML part, plus a base64 PDF attachment whose
// file name is RFC 2047 encoded.
const multipartMsg = "From: =?ISO-8859-1?Q?Andr=E9?= <andre@example.com>\r\n" +
	"To: bob@example.org\r\n" +
	"Subject: =?ISO-8859-1?Q?R=E9sum=E9?= attached\r\n" +
	"Message-ID: <abc.123@example.com>\r\n" +
	"MIME-Version: 1.0\r\n" +
	"Content-Type: multipart/mixed; boundary=\"outer\"\r\n" +
	"\r\n" +
	"This is a multi-part message in MIME format.\r\n" +
	"--outer\r\n" +
	"Content-Type: multipart/alternative; boundary=\"inner\"\r\n" +
	"\r\n" +
	"--inner\r\n" +
	"Content-Type: text/plain; charset=iso-8859-1\r\n" +
	"Content-Transfer-Encoding: quoted-printable\r\n" +
	"\r\n" +
	"Bonjour Bob,\r\n" +
	"voici mon r=E9sum=E9. Tr=E8s long=\r\n" +
	"ue ligne coup=E9e.\r\n" +
	"--inner\r\n" +
	"Content-Type: text/html; charset=utf-8\r\n" +
	"\r\n" +
	"<html><body><p>Bonjour <b>Bob</b></p></body></html>\r\n" +
	"--inner--\r\n" +
	"--outer\r\n" +
	"Content-Type: application/pdf; name=\"cv.pdf\"\r\n" +
	"Content-Disposition: attachment; filename=\"=?UTF-8?Q?r=C3=A9sum=C3=A9.pdf?=\"\r\n" +
	"Content-Transfer-Encoding: base64\r\n" +
	"\r\n" +
	"JVBERi0xLjQKJcfsj6IKNSAwIG9iago8PC9MZW5ndGggNiAwIFI+PgpzdHJlYW0K\r\n" +
	"--outer--\r\n"

func TestPreviewMultipart(t *testing.T) {
	p, err := PreviewMessage(context.Background(), []byte(multipartMsg), 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{}
	var keys []string
	for _, f := range p.Header {
		hdr[f.Key] = f.Value
		keys = append(keys, f.Key)
	}
	if got := strings.Join(keys, ","); got != "From,To,Subject,Message-Id,Mime-Version,Content-Type" {
		t.Errorf("header order %s", got)
	}
	if hdr["Subject"] != "Résumé attached" || hdr["From"] != "André <andre@example.com>" {
		t.Errorf("decoded header: %q %q", hdr["Subject"], hdr["From"])
	}
	wantText := "Bonjour Bob,\nvoici mon résumé. Très longue ligne coupée."
	if p.Text != wantText || p.TextType != "text/plain" || p.TextPath != "1.1" || p.Truncated {
		t.Errorf("text %q (%s %s, truncated %v), want %q", p.Text, p.TextType, p.TextPath, p.Truncated, wantText)
	}
	pdf, _ := base64.StdEncoding.DecodeString("JVBERi0xLjQKJcfsj6IKNSAwIG9iago8PC9MZW5ndGggNiAwIFI+PgpzdHJlYW0K")
	want := []Part{
		{Path: "", Depth: 0, ContentType: "multipart/mixed"},
		{Path: "1", Depth: 1, ContentType: "multipart/alternative"},
		{Path: "1.1", Depth: 2, ContentType: "text/plain", Charset: "iso-8859-1"},
		{Path: "1.2", Depth: 2, ContentType: "text/html", Charset: "utf-8"},
		{Path: "2", Depth: 1, ContentType: "application/pdf", Disposition: "attachment", Filename: "résumé.pdf", Size: int64(len(pdf))},
	}
	if len(p.Parts) != len(want) {
		t.Fatalf("parts %+v", p.Parts)
	}
	for i := range want {
		got := p.Parts[i]
		if i == 2 || i == 3 {
			if got.Size == 0 {
				t.Errorf("part %s: size 0", got.Path)
			}
			got.Size = 0
		}
		if got != want[i] {
			t.Errorf("part %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}

	out := p.String()
	for _, s := range []string{"Subject: Résumé attached\n", "  2          application/pdf \"résumé.pdf\" (48 bytes)\n",
		"--- part 1.1 (text/plain) ---\nBonjour Bob,\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestPreviewTruncateAndHTML(t *testing.T) {
	msg := "Subject: x\nContent-Type: text/plain; charset=utf-8\n\n" + strings.Repeat("é", 100)
	p, err := PreviewMessage(context.Background(), []byte(msg), 11)
	if err != nil {
		t.Fatal(err)
	}
	if p.Text != strings.Repeat("é", 5) || !p.Truncated {
		t.Errorf("truncated text %q %v", p.Text, p.Truncated)
	}

	msg = "Content-Type: text/html\r\n\r\n<html><head><style>p{color:red}</style><script>alert(1)</script></head>" +
		"<body><!-- hidden --><p>Hello &amp; welcome</p></body></html>"
	p, err = PreviewMessage(context.Background(), []byte(msg), 100)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(p.Text) != "Hello & welcome" || p.TextType != "text/html" || p.TextPath != "1" {
		t.Errorf("html text %q (%s %s)", p.Text, p.TextType, p.TextPath)
	}
}

func TestPreviewBroken(t *testing.T) {
	for name, msg := range map[string]string{
		"no header":         "just some text\n",
		"empty":             "",
		"garbage header":    "\x00\x01:\x02\r\n\tcont\r\nSubject: ok\r\n\r\nbody",
		"missing boundary":  "Content-Type: multipart/mixed\r\n\r\n--x\r\n\r\nbody\r\n--x--\r\n",
		"unclosed boundary": "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n",
		"unknown charset":   "Content-Type: text/plain; charset=x-klingon\r\n\r\nqapla'\r\n",
		"unknown encoding":  "Content-Transfer-Encoding: x-rot13\r\n\r\nuryyb\r\n",
		"bad base64":        "Content-Transfer-Encoding: base64\r\n\r\n!!!not base64!!!\r\n",
		"escape in body":    "Subject: x\r\n\r\n\x1b]0;owned\x07text\r\n",
	} {
		p, err := PreviewMessage(context.Background(), []byte(msg), 0)
		if p == nil {
			t.Errorf("%s: nil preview (err %v)", name, err)
			continue
		}
		out := p.String()
		for _, c := range out {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				t.Errorf("%s: control character %q in output %q", name, c, out)
				break
			}
		}
	}
	p, _ := PreviewMessage(context.Background(), []byte("Content-Type: text/plain; charset=x-klingon\r\n\r\nqapla'\r\n"), 0)
	if p.Text != "qapla'\n" || !strings.Contains(p.Parts[0].Err, "charset") {
		t.Errorf("unknown charset: %q %+v", p.Text, p.Parts)
	}
	p, _ = PreviewMessage(context.Background(), []byte("garbage line\r\nSubject: ok\r\n\r\nbody"), 0)
	if len(p.Header) != 1 || p.Header[0].Value != "ok" || p.Text != "body" {
		t.Errorf("garbage header: %+v", p)
	}
}

func FuzzPreview(f *testing.F) {
	f.Add([]byte(multipartMsg), 100)
	f.Add([]byte("Subject: =?utf-8?q?x?=\n\nbody"), 0)
	f.Add([]byte("Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\n--b--"), 5)
	f.Fuzz(func(t *testing.T, msg []byte, max int) {
		max %= 1 << 16
		p, _ := PreviewMessage(context.Background(), msg, max)
		if p == nil {
			t.Fatal("nil preview")
		}
		if max <= 0 {
			max = DefaultPreviewBytes
		}
		if len(p.Text) > max {
			t.Fatalf("text of %d bytes > %d", len(p.Text), max)
		}
		subject, id := HeaderInfo(msg)
		if len(subject) > maxSubjectBytes || len(id) > maxSubjectBytes {
			t.Fatal("header info too long")
		}
		_ = p.String()
	})
}

// TestPreviewHTMLLowercaseChangesLength: U+212A KELVIN
// SIGN (3 bytes) lower-cases to "k" (1 byte), so an HTML stripper that
// indexed the original text with offsets found in its lower-cased copy
// sliced out of range and panicked, crashing "quarantine show".
func TestPreviewHTMLLowercaseChangesLength(t *testing.T) {
	kelvin := strings.Repeat("\u212a", 6)
	msg := "Content-Type: text/html; charset=utf-8\r\n\r\n" + kelvin + "<b>bold</b> <SCRIPT>evil()</SCRIPT>after" + kelvin + "<p>end"
	p, err := PreviewMessage(context.Background(), []byte(msg), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := kelvin + "bold after" + kelvin + "\nend"
	if p.Text != want {
		t.Fatalf("text %q, want %q", p.Text, want)
	}
}

// FuzzStripHTML: any text, HTML or not, is stripped without a panic and
// cleans to text without control characters other than newline and tab.
func FuzzStripHTML(f *testing.F) {
	f.Add(strings.Repeat("\u212a", 6) + "<b>x</b>")
	f.Add("<html><head><style>p{}</style></head><body><!-- c --><p>a &amp; b<br>c</p><script>x</script>")
	f.Add("<a href='x'>unclosed <")
	f.Fuzz(func(t *testing.T, s string) {
		out := stripHTML(s)
		c := termsafe.Text(out)
		for _, r := range c {
			if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
				t.Fatalf("control character %q in %q", r, c)
			}
		}
	})
}
