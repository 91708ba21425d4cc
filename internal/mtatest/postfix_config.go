package mtatest

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// writeConfig writes a file into the configuration directory, backdated a
// minute: Postfix waits until a main.cf is older than a second or so.
func (p *Postfix) writeConfig(name, content string) error {
	path := filepath.Join(p.confDir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return err
	}
	old := time.Now().Add(-time.Minute)
	return os.Chtimes(path, old, old)
}

// createQueueDirs creates the queue directories metaDir/postfix-files
// lists, with their owner, group and mode.
func createQueueDirs(metaDir, queueDir string, mailOwner int, setgidGroup string) error {
	spec, err := os.ReadFile(filepath.Join(metaDir, "postfix-files"))
	if err != nil {
		return err
	}
	grp, err := user.LookupGroup(setgidGroup)
	if err != nil {
		return err
	}
	setgidGID, err := strconv.Atoi(grp.Gid)
	if err != nil {
		return err
	}
	owners := map[string]int{"root": 0, "$mail_owner": mailOwner}
	groups := map[string]int{"-": -1, "$setgid_group": setgidGID} // -1: unchanged
	made := 0
	for _, line := range strings.Split(string(spec), "\n") {
		// path:type:owner:group:mode:flags
		f := strings.Split(line, ":")
		if len(f) < 5 || f[1] != "d" || !strings.HasPrefix(f[0], "$queue_directory/") {
			continue
		}
		dir := filepath.Join(queueDir, strings.TrimPrefix(f[0], "$queue_directory/"))
		mode, err := strconv.ParseUint(f[4], 8, 32)
		if err != nil {
			return fmt.Errorf("postfix-files: %q: %w", line, err)
		}
		uid, okOwner := owners[f[2]]
		gid, okGroup := groups[f[3]]
		if !okOwner || !okGroup {
			return fmt.Errorf("postfix-files: %q: unknown owner or group", line)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
		if err := os.Chmod(dir, os.FileMode(mode)); err != nil {
			return err
		}
		made++
	}
	if made == 0 {
		return errors.New("postfix-files lists no queue directories")
	}
	return nil
}

// mainParam is one main.cf parameter.
type mainParam struct{ k, v string }

// buildMainCF returns the instance's main.cf.
func buildMainCF(opts PostfixOptions, root, queueDir, dataDir, logFile string) (string, error) {
	if opts.Milter == "" && opts.MilterPrivate != "" {
		if strings.ContainsAny(opts.MilterPrivate, "/ \t\r\n,{}") {
			return "", fmt.Errorf("MilterPrivate %q: want a file name", opts.MilterPrivate)
		}
		opts.Milter = "unix:" + filepath.Join(queueDir, "private", opts.MilterPrivate)
	}
	params, err := optionParams(opts, baseParams(root, queueDir, dataDir, logFile))
	if err != nil {
		return "", err
	}
	if params, err = extraParams(params, opts.ExtraMainCF); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# Written by ratelimitd internal/mtatest for one test; see its package doc.\n")
	for _, p := range params {
		fmt.Fprintf(&b, "%s = %s\n", p.k, p.v)
	}
	return b.String(), nil
}

// baseParams are the parameters of every instance.
func baseParams(root, queueDir, dataDir, logFile string) []mainParam {
	return []mainParam{
		{"compatibility_level", "3.6"},
		{"queue_directory", queueDir},
		{"data_directory", dataDir},
		{"maillog_file", logFile},
		{"maillog_file_prefixes", root},
		{"smtpd_banner", "$myhostname ESMTP Postfix " + banner(root)},
		{"myhostname", "mtatest.localdomain"},
		{"mydomain", "localdomain"},
		{"myorigin", "$myhostname"},
		{"mydestination", ""},
		{"local_recipient_maps", ""},
		{"alias_maps", ""},
		{"alias_database", ""},
		{"inet_interfaces", "127.0.0.1"},
		{"inet_protocols", "ipv4"},
		{"mynetworks", "127.0.0.0/8"},
		{"biff", "no"},
		{"append_dot_mydomain", "no"},
		{"readme_directory", "no"},
		{"smtp_dns_support_level", "disabled"},
		{"smtpd_peername_lookup", "no"},
		{"smtp_connect_timeout", "2s"},
		{"smtp_helo_timeout", "10s"},
		{"queue_run_delay", "1s"},
		{"minimal_backoff_time", "1s"},
		{"maximal_backoff_time", "2s"},
		{"in_flow_delay", "0"},
		{"smtpd_error_sleep_time", "0"},
		{"smtpd_soft_error_limit", "1000"},
		{"smtpd_hard_error_limit", "1000"},
		{"smtpd_junk_command_limit", "1000"},
		// XCLIENT LOGIN= makes a SASL-authenticated session.
		{"smtpd_authorized_xclient_hosts", "127.0.0.0/8"},
		{"smtpd_sasl_auth_enable", "yes"},
		{"smtpd_relay_restrictions", "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"},
	}
}

// optionParams appends the parameters opts asks for.
func optionParams(opts PostfixOptions, params []mainParam) ([]mainParam, error) {
	if opts.SinkAddr != "" {
		host, port, err := net.SplitHostPort(opts.SinkAddr)
		if err != nil {
			return nil, fmt.Errorf("SinkAddr %q: %w", opts.SinkAddr, err)
		}
		params = append(params, mainParam{"relayhost", "[" + host + "]:" + port})
	} else {
		// Deliveries wait for "postqueue -f", which fails without DNS.
		params = append(params, mainParam{"relayhost", ""}, mainParam{"defer_transports", "smtp"})
	}
	rcpt := "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"
	eod := ""
	if opts.PolicyService != "" {
		policy := "check_policy_service { " + opts.PolicyService + ", timeout=10s, default_action=DUNNO }"
		rcpt = policy + ", " + rcpt
		eod = policy
	}
	params = append(params,
		mainParam{"smtpd_recipient_restrictions", rcpt},
		mainParam{"smtpd_end_of_data_restrictions", eod})
	if opts.Milter != "" {
		params = append(params,
			mainParam{"smtpd_milters", opts.Milter},
			mainParam{"milter_default_action", "tempfail"},
			mainParam{"milter_protocol", "6"})
	}
	return params, nil
}

// extraParams sets extra over params, new names appended in order.
func extraParams(params []mainParam, extra map[string]string) ([]mainParam, error) {
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if k == "" || strings.ContainsAny(k, " \t\n=") {
			return nil, fmt.Errorf("ExtraMainCF: bad parameter name %q", k)
		}
		if k == "smtpd_banner" {
			return nil, errors.New("ExtraMainCF: smtpd_banner is the harness's (it names the instance)")
		}
		v := extra[k]
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("ExtraMainCF: %s: value has a line break", k)
		}
		if i := slices.IndexFunc(params, func(p mainParam) bool { return p.k == k }); i >= 0 {
			params[i].v = v // the names in params are distinct
		} else {
			params = append(params, mainParam{k, v})
		}
	}
	return params, nil
}

// buildMasterCF turns the system master.cf into the instance's: smtp on
// 127.0.0.1:smtpPort, no other inet service, no chroot.
func buildMasterCF(sys string, smtpPort, reinjectPort int) (string, error) {
	var b strings.Builder
	b.WriteString("# Written by ratelimitd internal/mtatest from /etc/postfix/master.cf.\n")
	dropping, haveSMTP := false, false
	for _, line := range strings.SplitAfter(sys, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			b.WriteString(line)
			continue
		case line[0] == ' ' || line[0] == '\t':
			// Continuation of the previous entry.
			if dropping {
				b.WriteString("#mtatest# " + line)
			} else {
				b.WriteString(line)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 8 {
			dropping = false
			b.WriteString(line)
			continue
		}
		if f[1] == "inet" {
			if f[0] == "smtp" && !haveSMTP {
				f[0] = "127.0.0.1:" + strconv.Itoa(smtpPort)
				haveSMTP = true
			} else {
				dropping = true
				b.WriteString("#mtatest# " + line)
				continue
			}
		}
		dropping = false
		f[4] = "n" // chroot
		b.WriteString(strings.Join(f, " ") + "\n")
	}
	if !haveSMTP {
		return "", errors.New(`/etc/postfix/master.cf has no "smtp inet" service`)
	}
	if reinjectPort != 0 {
		fmt.Fprintf(&b, "127.0.0.1:%d inet n - n - - smtpd\n", reinjectPort)
		b.WriteString("  -o syslog_name=postfix/reinject\n")
		b.WriteString("  -o smtpd_milters=\n")
		b.WriteString("  -o smtpd_client_restrictions=\n")
		b.WriteString("  -o smtpd_helo_restrictions=\n")
		b.WriteString("  -o smtpd_sender_restrictions=\n")
		b.WriteString("  -o smtpd_relay_restrictions=permit_mynetworks,reject\n")
		b.WriteString("  -o smtpd_recipient_restrictions=permit_mynetworks,reject\n")
		b.WriteString("  -o smtpd_data_restrictions=\n")
		b.WriteString("  -o smtpd_end_of_data_restrictions=\n")
	}
	return b.String(), nil
}

// validateService rejects an endpoint that would break main.cf.
func validateService(s string) error {
	if s == "" {
		return nil
	}
	if strings.ContainsAny(s, " \t\r\n,{}") {
		return fmt.Errorf("%q: must not contain spaces, commas or braces", s)
	}
	if !strings.HasPrefix(s, "inet:") && !strings.HasPrefix(s, "unix:") {
		return fmt.Errorf(`%q: want "inet:HOST:PORT" or "unix:/PATH"`, s)
	}
	return nil
}

// lookCommand finds a Postfix command in PATH, dir or the sbin directories.
func lookCommand(name, dir string) string {
	for _, d := range []string{"", dir, "/usr/sbin", "/usr/local/sbin", "/sbin"} {
		if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			return p
		}
	}
	return ""
}

// checkSearchable fails unless dir and its ancestors are searchable by all.
func checkSearchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %v) is not searchable by other users", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
