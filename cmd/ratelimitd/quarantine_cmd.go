package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// listQuery is the filter of `quarantine list` and GET /v1/quarantine.
type listQuery struct {
	Sender string
	Key    string
	Limit  string
	State  string
	Since  time.Duration
}

func (lq listQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"sender": lq.Sender, "key": lq.Key, "limit": lq.Limit, "state": lq.State} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if lq.Since > 0 {
		v.Set("since", lq.Since.String())
	}
	return v
}

func parseListQuery(v url.Values) (listQuery, error) {
	lq := listQuery{Sender: v.Get("sender"), Key: v.Get("key"), Limit: v.Get("limit"), State: v.Get("state")}
	if s := v.Get("since"); s != "" {
		d, err := policy.ParseDuration(s)
		if err != nil {
			return lq, err
		}
		lq.Since = d
	}
	return lq, nil
}

func (lq listQuery) filter() (quarantine.Filter, error) {
	f := quarantine.Filter{Sender: lq.Sender, Key: lq.Key, Limit: lq.Limit}
	if lq.State != "" && lq.State != "pending" {
		for _, name := range strings.Split(lq.State, ",") {
			st, err := quarantine.ParseState(name)
			if err != nil {
				return f, err
			}
			f.States = append(f.States, st)
		}
	}
	if lq.Since > 0 {
		f.Since = time.Now().Add(-lq.Since)
	}
	return f, nil
}

// showResult is the answer to GET /v1/quarantine/{id}.
type showResult struct {
	Entry quarantine.Entry `json:"entry"`
	Body  string           `json:"body"`
	Error string           `json:"error,omitempty"`
}

func registerQuarantineRoutes(mux *http.ServeMux, svc func() *lifecycle.Service) {
	mux.HandleFunc("GET /v1/quarantine", func(w http.ResponseWriter, r *http.Request) {
		lq, err := parseListQuery(r.URL.Query())
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		f, err := lq.filter()
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		es, err := svc().List(f)
		if err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, http.StatusOK, es)
	})
	mux.HandleFunc("GET /v1/quarantine/{id}", func(w http.ResponseWriter, r *http.Request) {
		res, err := showEntry(r.Context(), svc(), r.PathValue("id"), r.URL.Query().Get("raw") == "1")
		if err != nil {
			fail(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	action := func(do func(*lifecycle.Service, context.Context, lifecycle.Selection) ([]lifecycle.Outcome, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var sel lifecycle.Selection
			if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&sel); err != nil {
				fail(w, http.StatusBadRequest, err)
				return
			}
			sel.By = who(r)
			out, err := do(svc(), r.Context(), sel)
			if err != nil {
				fail(w, http.StatusBadRequest, err)
				return
			}
			writeJSON(w, http.StatusOK, out)
		}
	}
	mux.HandleFunc("POST /v1/quarantine/thaw", action((*lifecycle.Service).Thaw))
	mux.HandleFunc("POST /v1/quarantine/delete", action((*lifecycle.Service).Delete))
	mux.HandleFunc("POST /v1/quarantine/suspend", func(w http.ResponseWriter, r *http.Request) {
		var req suspendRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.Key == "" {
			fail(w, http.StatusBadRequest, fmt.Errorf("name a key"))
			return
		}
		res, err := suspendKey(svc(), req, who(r))
		if err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
}

// quarantineBackend answers the quarantine commands from the running
// daemon, or from the BoltDB file when no daemon runs.
type quarantineBackend struct {
	client *adminClient       // online
	svc    *lifecycle.Service // offline
	close  func() error
}

func openQuarantineBackend(opts *rootOptions) (*quarantineBackend, error) {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return nil, err
	}
	c := newAdminClient(f.Server.AdminSocket)
	var st Status
	if err := c.do("GET", "/v1/status", nil, &st); err == nil {
		return &quarantineBackend{client: c, close: func() error { return nil }}, nil
	} else if !errors.Is(err, errNoDaemon) {
		return nil, err
	}
	o, err := openOffline(f)
	if err != nil {
		return nil, err
	}
	q, err := quarantine.New(o.db, quarantine.Options{MaxSize: int64(f.Quarantine.MaxSize)})
	if err == nil {
		var svc *lifecycle.Service
		if svc, err = newLifecycle(q, f, o.engine, newLogger(f.Server, io.Discard), nil); err == nil {
			return &quarantineBackend{svc: svc, close: o.close}, nil
		}
	}
	o.close()
	return nil, err
}

// withQuarantineBackend opens the backend, runs fn on it and closes it; it
// returns fn's error, else the error of closing.
func withQuarantineBackend(opts *rootOptions, fn func(*quarantineBackend) error) error {
	b, err := openQuarantineBackend(opts)
	if err != nil {
		return err
	}
	err = fn(b)
	if cerr := b.close(); err == nil {
		err = cerr
	}
	return err
}

func (b *quarantineBackend) list(lq listQuery) ([]quarantine.Entry, error) {
	if b.client != nil {
		var out []quarantine.Entry
		err := b.client.do("GET", "/v1/quarantine?"+lq.values().Encode(), nil, &out)
		return out, err
	}
	f, err := lq.filter()
	if err != nil {
		return nil, err
	}
	return b.svc.List(f)
}

func (b *quarantineBackend) show(id string, raw bool) (showResult, error) {
	if b.client != nil {
		var out showResult
		q := ""
		if raw {
			q = "?raw=1"
		}
		err := b.client.do("GET", "/v1/quarantine/"+url.PathEscape(id)+q, nil, &out)
		return out, err
	}
	return showEntry(context.Background(), b.svc, id, raw)
}

// showEntry is svc.Show as the admin API and the offline CLI answer it:
// quarantine.ErrNotFound is the only error; content that is unavailable
// (postcat failed, no queue ID) is the result's Error, next to the entry.
func showEntry(ctx context.Context, svc *lifecycle.Service, id string, raw bool) (showResult, error) {
	e, body, err := svc.Show(ctx, id, raw)
	if errors.Is(err, quarantine.ErrNotFound) {
		return showResult{}, err
	}
	res := showResult{Entry: e, Body: string(body)}
	if err != nil {
		res.Error = err.Error()
	}
	return res, nil
}

func (b *quarantineBackend) act(op string, sel lifecycle.Selection) ([]lifecycle.Outcome, error) {
	if b.client != nil {
		var out []lifecycle.Outcome
		err := b.client.do("POST", "/v1/quarantine/"+op, sel, &out)
		return out, err
	}
	sel.By = cliUser() + ", offline CLI"
	if op == "thaw" {
		return b.svc.Thaw(context.Background(), sel)
	}
	return b.svc.Delete(context.Background(), sel)
}

// suspendRequest and suspendResult are POST /v1/quarantine/suspend.
type suspendRequest struct {
	Key    string `json:"key"`
	Resume bool   `json:"resume,omitempty"`
}

type suspendResult struct {
	Key       string `json:"key"`
	Suspended bool   `json:"suspended"`
	Was       bool   `json:"was_suspended,omitempty"`
}

func (b *quarantineBackend) suspend(key string, resume bool) (suspendResult, error) {
	req := suspendRequest{Key: key, Resume: resume}
	if b.client != nil {
		var out suspendResult
		err := b.client.do("POST", "/v1/quarantine/suspend", req, &out)
		return out, err
	}
	return suspendKey(b.svc, req, "offline CLI")
}

// suspendKey suspends or resumes req.Key's automatic release; by names
// who, for the log. Errors: those of the store.
func suspendKey(svc *lifecycle.Service, req suspendRequest, by string) (suspendResult, error) {
	res := suspendResult{Key: req.Key, Suspended: !req.Resume}
	var err error
	if req.Resume {
		res.Was, err = svc.Resume(req.Key, by)
	} else {
		err = svc.Suspend(req.Key, by)
	}
	return res, err
}

func newQuarantineCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "quarantine",
		Aliases: []string{"q"},
		Short:   "Review, thaw and delete held and frozen mail",
		Long: `Review the messages ratelimitd held or froze.

A "hold" limit leaves the message in the MTA's hold queue (Postfix: HOLD,
released with postsuper -H); a "freeze" limit (milter) keeps the whole
message in ratelimitd's BoltDB quarantine and has the MTA discard its copy;
thawing re-injects it over SMTP to quarantine.reinject_addr with its
original envelope and an X-Ratelimitd-Thawed header.

The typical newsletter case: list what alice's account sent, look at a
sample, then release everything and forget her rate in one step:

  ratelimitd quarantine list --sender alice@example.org
  ratelimitd quarantine show 0195F3A2B4C00001
  ratelimitd quarantine thaw --sender alice@example.org --reset-rate

and for a spam run from a compromised account:

  ratelimitd quarantine delete --sender alice@example.org`,
	}
	var lq listQuery
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List quarantined messages (newest first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var es []quarantine.Entry
			if err := withQuarantineBackend(opts, func(b *quarantineBackend) (err error) {
				es, err = b.list(lq)
				return err
			}); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, e := range es {
					if err := enc.Encode(e); err != nil {
						return err
					}
				}
				return nil
			}
			printEntries(cmd.OutOrStdout(), es)
			return nil
		},
	}
	list.Flags().StringVar(&lq.Sender, "sender", "", "only this envelope sender")
	list.Flags().StringVar(&lq.Key, "key", "", "only this rate key (e.g. the SASL user)")
	list.Flags().StringVar(&lq.Limit, "limit", "", "only messages stopped by this limit")
	list.Flags().StringVar(&lq.State, "state", "", "held, frozen, thawed, deleted (comma-separated); default held and frozen")
	list.Flags().DurationVar(&lq.Since, "since", 0, "only messages quarantined within this long (e.g. 2h)")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON Lines")

	var raw, showJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a message: envelope, decision, headers and a text preview",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res showResult
			if err := withQuarantineBackend(opts, func(b *quarantineBackend) (err error) {
				res, err = b.show(args[0], raw)
				return err
			}); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if showJSON {
				return printJSON(w, res)
			}
			if raw {
				io.WriteString(w, res.Body)
				return nil
			}
			res.Entry.WriteTo(w)
			fmt.Fprintln(w)
			// Held mail is shown by the MTA (postcat): its output is
			// message content and is cleaned like our own preview.
			io.WriteString(w, quarantine.CleanText(res.Body))
			if res.Error != "" {
				fmt.Fprintf(w, "\n(content unavailable: %s)\n", quarantine.CleanLine(res.Error))
			}
			return nil
		},
	}
	show.Flags().BoolVar(&raw, "raw", false, "print the stored message bytes (frozen) or the MTA's queue file (held)")
	show.Flags().BoolVar(&showJSON, "json", false, "print a JSON object: the entry, the preview (or --raw bytes) as body, and any error")

	var sel lifecycle.Selection
	thaw := &cobra.Command{
		Use:   "thaw [ID...] [--sender S | --key K] [--reset-rate] [--force]",
		Short: "Release held or frozen messages for delivery",
		Long: `Release messages: held ones with quarantine.release_command
(postsuper -H QUEUEID, then postqueue -i QUEUEID), frozen ones by SMTP
re-injection to quarantine.reinject_addr. A message whose re-injection
fails stays frozen with the error recorded (see list --json). Each message
is claimed first, so concurrent thaws send it once. --reset-rate also
forgets the rate of every key involved, so the sender may send again at
once; --force re-injects frozen messages whose last thaw was interrupted.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel.IDs = args
			if err := needSelection(cmd, sel); err != nil {
				return err
			}
			return runAction(cmd, opts, "thaw", sel)
		},
	}
	thaw.Flags().StringVar(&sel.Sender, "sender", "", "every held/frozen message from this envelope sender")
	thaw.Flags().StringVar(&sel.Key, "key", "", "every held/frozen message of this rate key")
	thaw.Flags().BoolVar(&sel.ResetRate, "reset-rate", false, "also reset the rate of the keys involved")
	thaw.Flags().BoolVar(&sel.Force, "force", false, "also re-inject frozen messages whose last thaw was interrupted (they may be delivered twice)")

	var dsel lifecycle.Selection
	var yes bool
	del := &cobra.Command{
		Use:   "delete [ID...] [--sender S | --key K | --older-than D] [--yes]",
		Short: "Delete held or frozen messages (held ones from the MTA too)",
		Long: `Delete held or frozen messages; held ones are deleted from the MTA's
queue too (quarantine.delete_command, postsuper -d QUEUEID). When the
selection holds more than one message the command asks for confirmation
on standard input, and deletes nothing unless the answer is "y"; --yes
skips the question (for scripts).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			dsel.IDs = args
			if err := needSelection(cmd, dsel); err != nil {
				return err
			}
			if !yes {
				if err := confirmDelete(cmd, opts, dsel); err != nil {
					return err
				}
			}
			return runAction(cmd, opts, "delete", dsel)
		},
	}
	del.Flags().StringVar(&dsel.Sender, "sender", "", "every held/frozen message from this envelope sender")
	del.Flags().StringVar(&dsel.Key, "key", "", "every held/frozen message of this rate key")
	del.Flags().DurationVar(&dsel.OlderThan, "older-than", 0, "every held/frozen message quarantined longer ago than this")
	del.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	del.Flags().BoolVar(&dsel.Force, "force", false, "also delete frozen messages whose last thaw was interrupted")
	suspendCmd := func(resume bool) *cobra.Command {
		use, short := "suspend KEY", "Stop automatic release (auto_release = \"drip\") of a key's held and frozen mail"
		if resume {
			use, short = "resume KEY", "Allow automatic release of a key's held and frozen mail again"
		}
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var res suspendResult
				if err := withQuarantineBackend(opts, func(b *quarantineBackend) (err error) {
					res, err = b.suspend(args[0], resume)
					return err
				}); err != nil {
					return err
				}
				key := quarantine.CleanLine(res.Key)
				switch {
				case !resume:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: automatic release suspended\n", key)
				case res.Was:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: automatic release resumed\n", key)
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: was not suspended\n", key)
				}
				return nil
			},
		}
	}
	cmd.AddCommand(list, show, thaw, del, suspendCmd(false), suspendCmd(true))
	return cmd
}

func runAction(cmd *cobra.Command, opts *rootOptions, op string, sel lifecycle.Selection) error {
	var out []lifecycle.Outcome
	if err := withQuarantineBackend(opts, func(b *quarantineBackend) (err error) {
		out, err = b.act(op, sel)
		return err
	}); err != nil {
		return err
	}
	done := strings.TrimSuffix(op, "e") + "ed" // thawed, deleted
	failed := 0
	for _, o := range out {
		id, sender := quarantine.CleanLine(o.ID), quarantine.CleanLine(o.Sender)
		if o.OK {
			note := ""
			if o.Note != "" {
				note = " (" + quarantine.CleanLine(o.Note) + ")"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s%s\n", id, sender, done, note)
		} else {
			failed++
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: FAILED: %s\n", id, sender, quarantine.CleanLine(o.Error))
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d %s, %d failed\n", len(out)-failed, done, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d messages could not be %s", failed, len(out), done)
	}
	return nil
}

// needSelection refuses a thaw or delete that names nothing, naming the
// selection flags the command has.
func needSelection(cmd *cobra.Command, sel lifecycle.Selection) error {
	if len(sel.IDs) > 0 || sel.Sender != "" || sel.Key != "" || sel.OlderThan > 0 {
		return nil
	}
	var flags []string
	for _, f := range []string{"sender ADDRESS", "key KEY", "older-than DURATION"} {
		if cmd.Flags().Lookup(strings.Fields(f)[0]) != nil {
			flags = append(flags, "--"+f)
		}
	}
	return usageError{fmt.Errorf("name the messages to %s: IDs (see ratelimitd quarantine list) or %s", cmd.Name(), strings.Join(flags, ", "))}
}

// confirmDelete counts the messages a delete would select and, when there
// is more than one, asks on standard input; anything but "y" or "yes"
// (including end of input) cancels.
func confirmDelete(cmd *cobra.Command, opts *rootOptions, sel lifecycle.Selection) error {
	n := len(sel.IDs)
	if n == 0 {
		var es []quarantine.Entry
		if err := withQuarantineBackend(opts, func(b *quarantineBackend) (err error) {
			es, err = b.list(listQuery{Sender: sel.Sender, Key: sel.Key})
			return err
		}); err != nil {
			return err
		}
		for _, e := range es {
			if sel.OlderThan <= 0 || time.Since(e.Created) > sel.OlderThan {
				n++
			}
		}
	}
	if n <= 1 {
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Delete %d messages? [y/N] ", n)
	answer, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return nil
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return fmt.Errorf("nothing deleted: %d messages selected and not confirmed (answer y, or add --yes)", n)
}

func printEntries(w io.Writer, es []quarantine.Entry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGE\tSENDER\tRCPTS\tSIZE\tLIMIT\tSUBJECT")
	now := time.Now()
	for _, e := range es {
		subj := []rune(quarantine.CleanLine(e.Subject))
		if len(subj) > 60 {
			subj = append(subj[:57], []rune("...")...)
		}
		sender := quarantine.CleanLine(e.Sender)
		if sender == "" {
			sender = "<>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", quarantine.CleanLine(e.ID), e.State, policy.FormatDuration(now.Sub(e.Created).Round(time.Second)),
			sender, len(e.Recipients), e.Size, quarantine.CleanLine(e.Limit), string(subj))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d messages\n", len(es))
}
