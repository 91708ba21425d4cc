package config

import (
	"fmt"
	"io"
	"strings"
)

// Tables describes each table of the file, in the order the reference
// shows them. Every key of Keys belongs to one of them.
var Tables = []struct{ Name, Doc string }{
	{"server", "Where the daemon listens and keeps its state."},
	{"policy", "What is limited: client subnets, the warn header, the no-limits switch."},
	{"policy.exempt", "Who is never limited."},
	{"limit", "One `[[limit]]` table per limit; the stack is evaluated in order. At least one is required unless `[policy] limits = \"none\"`."},
	{"store", "Where rate state lives: this host (memory and the BoltDB file) or Redis, shared by several MTAs (docs/redis.md)."},
	{"quarantine", "Held and frozen mail: storage, release, expiry (docs/operations.md)."},
	{"milter", "The milter front end, needed to freeze (docs/postfix.md)."},
	{"notify", "Notifications to the postmaster; off until `webhook.url` or `mail.to` is set."},
	{"notify.webhook", "One signed JSON object per event, POSTed."},
	{"notify.mail", "Mail to the postmaster (and optionally the sender) through an SMTP relay."},
	{"web", "The browser console (docs/console.md); off until `listen` is set. SIGHUP rereads the users file and the TLS files."},
	{"events", "The history of refusals, warnings, quarantine and operator actions, and reloads in the state file (`ratelimitd events`, docs/operations.md)."},
}

// Keys documents every key of the configuration file; the package's tests
// check that it lists exactly the keys of FileKeys and that each Default
// is the value the loader fills in.
var Keys = []Key{
	{Name: "server.policy_listen", Default: `["127.0.0.1:10031"]`, Doc: "Policy delegation listeners: \"host:port\" (loopback unless allow_networks is set) or \"unix:/path\", e.g. \"unix:/var/spool/postfix/private/ratelimitd\". A socket systemd passes (socket activation) for one of these addresses is used as it is; the others are opened by the daemon."},
	{Name: "server.socket_mode", Default: `"0660"`, Unit: "octal permission", Doc: "Permission of unix policy and milter sockets; world-writable modes are refused."},
	{Name: "server.socket_group", DefaultNote: "the daemon's group", Doc: "Group of unix policy and milter sockets, e.g. \"postfix\" (Postfix connects as a member of it)."},
	{Name: "server.allow_networks", Default: `[]`, DefaultNote: "loopback only", Doc: "Client networks (addresses or prefixes) TCP listeners accept; others are closed before anything is read."},
	{Name: "server.state_dir", DefaultNote: "/var/lib/ratelimitd as root, ./ratelimitd-state otherwise", Doc: "Directory of the BoltDB file (rate state and quarantine) and, by default, the admin socket."},
	{Name: "server.admin_socket", DefaultNote: "STATE_DIR/admin.sock", Doc: "Admin unix socket the CLI talks to; its directory must not be world-writable."},
	{Name: "server.metrics_listen", Default: `"127.0.0.1:9731"`, Doc: "Prometheus /metrics address (numeric host:port); \"\" disables it."},
	{Name: "server.flush_interval", Default: `"1s"`, Doc: "How often rate state is written to BoltDB: a crash loses at most this much counting (at most 1m)."},
	{Name: "server.max_keys", DefaultNote: "4000000", Unit: "(limit, key) pairs", Doc: "Bound on tracked rate states; the least recently seen are evicted first, never one at or above half its limit."},
	{Name: "server.idle_timeout", Default: `"330s"`, Doc: "Closes a policy connection idle that long (above Postfix's smtpd_policy_service_max_idle of 300s)."},
	{Name: "server.request_timeout", Default: `"10s"`, Doc: "Bound on reading and answering one request, from its first byte."},
	{Name: "server.max_connections", DefaultNote: "0: min(1024, RLIMIT_NOFILE/2)", Unit: "connections", Doc: "Cap on policy and milter connections open at once; one over it is closed at once and counted."},
	{Name: "server.log_level", Default: `"info"`, Doc: "debug, info, warn or error."},
	{Name: "server.log_format", Default: `"text"`, Doc: "text or json."},

	{Name: "policy.subnet_v4", DefaultNote: "24", Unit: "prefix bits", Doc: "Prefix length of the client_subnet key for IPv4 clients (1 to 32)."},
	{Name: "policy.subnet_v6", DefaultNote: "64", Unit: "prefix bits", Doc: "Prefix length of the client_subnet key for IPv6 clients (1 to 128)."},
	{Name: "policy.address_case", DefaultNote: `"fold"`, Doc: "fold: the local part of addresses is lower-cased in rate keys (Alice@x and alice@x are one key); keep: as sent. Domains are always lower-cased (IDNA ASCII form). docs/keys.md."},
	{Name: "policy.recipient_delimiter", DefaultNote: `"+"`, Doc: "Characters that start an address extension, removed from rate keys as Postfix's recipient_delimiter (alice+news@x is alice@x); \"\" keeps extensions."},
	{Name: "policy.ipv4_prefix", DefaultNote: "32", Unit: "prefix bits", Doc: "Prefix length a client_address key is masked to for IPv4 clients (8 to 32); IPv4-mapped IPv6 clients count as IPv4."},
	{Name: "policy.ipv6_prefix", DefaultNote: "64", Unit: "prefix bits", Doc: "Prefix length a client_address key is masked to for IPv6 clients (32 to 128): one customer network is one key."},
	{Name: "policy.on_full", DefaultNote: `"defer"`, Doc: "Answer to a new sender when the key table (server.max_keys) is full of keys over or near their limit, which are never evicted: defer (450 4.7.1, logged and counted as a fault) or dunno (let it through unmeasured)."},
	{Name: "policy.warn_header", DefaultNote: `"X-Ratelimitd-Warning"`, Doc: "Header a warn limit prepends; \"\" means warn only logs."},
	{Name: "policy.limits", Doc: "\"none\" runs without any [[limit]] on purpose; without it a file with no [[limit]] is refused."},
	{Name: "policy.stages", Doc: "Obsolete and ignored (config check says so): the protocol states asked at are learned."},
	{Name: "policy.exempt.networks", Default: `[]`, Doc: "Client addresses or prefixes never limited."},
	{Name: "policy.exempt.users", Default: `[]`, Doc: "SASL user names never limited (case-insensitive)."},
	{Name: "policy.exempt.senders", Default: `[]`, Doc: "Envelope senders (\"news@example.org\") or domains (\"@example.org\") never limited (case-insensitive)."},

	{Name: "limit.name", DefaultNote: "required", Doc: "Names the limit in logs, metrics and the CLI: [a-z0-9_-], unique."},
	{Name: "limit.key", DefaultNote: "required", Doc: "Request attributes joined into the rate key: sasl_username, sender, sender_domain, client_address, client_subnet, client_name, helo_name, recipient, recipient_domain."},
	{Name: "limit.limit", DefaultNote: "required (baseline: cap)", Unit: "cost per period", Doc: "Permitted cost per period; also the burst a quiet sender may send at once. At most 1e15; at least 1 except per = \"byte\" (and earrrl)."},
	{Name: "limit.period", DefaultNote: "required", Doc: "Averaging period, e.g. \"1h\", \"24h\"; 1s to 366d."},
	{Name: "limit.per", DefaultNote: `"mail"`, Doc: "Cost unit: mail, rcpt, byte, conn, or addr (1 per recipient not sent to within the period)."},
	{Name: "limit.mode", DefaultNote: `"leaky"`, Doc: "leaky (refused attempts not counted), strict (every attempt counts), forgiving (counted, clamped to the limit) or readonly (measure only)."},
	{Name: "limit.action", DefaultNote: `"defer"`, Doc: "Over the limit: defer (450), reject (550), warn (header), hold (MTA hold queue) or freeze (milter quarantine)."},
	{Name: "limit.algorithm", DefaultNote: `"exponential"`, Doc: "exponential (Exim's EWMA), gcra, cooldown, earrrl or baseline (relative to the key's learned peak)."},
	{Name: "limit.factor", DefaultNote: "3 (baseline only)", Doc: "Baseline: a key is refused above factor times its learned typical peak."},
	{Name: "limit.floor", DefaultNote: "required with baseline", Unit: "cost per period", Doc: "Baseline: the allowance of a key with no history, and the least any key gets."},
	{Name: "limit.cap", DefaultNote: "limit (baseline only)", Unit: "cost per period", Doc: "Baseline: the most any key gets."},
	{Name: "limit.learn_period", DefaultNote: `"4w" (baseline only)`, Doc: "Baseline: a key's learned peak is forgotten by 1/e per learn_period."},
	{Name: "limit.half_life", DefaultNote: "period × ln 2 (earrrl only)", Doc: "EARRRL's half-life."},
	{Name: "limit.message", DefaultNote: `"rate limit exceeded: {rate} per {period} (limit {limit}); try again in {retry}"`, Doc: "Client text template; placeholders {name}, {key}, {rate}, {limit}, {period}, {retry}."},
	{Name: "limit.overrides", Unit: "cost per period", Doc: "Per-key limits, e.g. { news = 5000, \"@partner.example\" = 500 } (\"@domain\": default of that domain's addresses); with baseline, a fixed allowance."},
	{Name: "limit.via", DefaultNote: "both", Doc: "Front ends this limit measures: \"policy\" and/or \"milter\"; give each limit one when an MTA asks through both."},
	{Name: "limit.auto_release", DefaultNote: `"none"`, Doc: "\"drip\" releases a key's held/frozen mail oldest first at the limit's rate once it is back under it (hold and freeze limits)."},

	{Name: "store.backend", Default: `"local"`, Doc: "local (memory and the BoltDB file) or redis."},
	{Name: "store.redis_addrs", Default: `["127.0.0.1:6379"]`, Doc: "host:port: one for a standalone Redis, several for a Redis Cluster, the Sentinels when redis_sentinel_master is set."},
	{Name: "store.redis_sentinel_master", Doc: "Master set name the Sentinels monitor; set, redis_addrs are the Sentinels."},
	{Name: "store.redis_username", Doc: "Redis AUTH user name."},
	{Name: "store.redis_password", Doc: "Redis AUTH password."},
	{Name: "store.redis_db", DefaultNote: "0", Unit: "database number", Doc: "Redis SELECT database."},
	{Name: "store.redis_tls", DefaultNote: "false", Doc: "Use TLS (system roots) for every Redis connection."},
	{Name: "store.redis_timeout", Default: `"200ms"`, Doc: "Bound on each request's Redis round trip; past it on_redis_error applies."},
	{Name: "store.on_redis_error", Default: `"local"`, Doc: "When Redis fails: local (decide from this host's copy of the states Redis returned; add what it counted to Redis once on recovery), dunno or defer (docs/redis.md)."},
	{Name: "store.degraded_share", Default: `"last"`, Doc: "With on_redis_error = local: last (each host may use the whole limit from the state it last knew) or split (each host gets limit/redis_hosts while degraded)."},
	{Name: "store.redis_hosts", Default: "1", Unit: "hosts", Doc: "How many hosts share the Redis state: the N of degraded_share = split."},
	{Name: "store.redis_known_records", DefaultNote: "0 (114,688)", Unit: "records", Doc: "Rate keys whose Redis record each host remembers for the fast path (the host decides, the script only confirms; about 100 bytes each; docs/redis.md). 0: the default; -1: no fast path, the script decides every request."},
	{Name: "store.key_prefix", Default: `"ratelimitd:"`, Doc: "Starts every Redis key; must not contain '{' or '}'."},

	{Name: "quarantine.max_size", Default: `"2G"`, Unit: "bytes", Doc: "Bound on the bytes of frozen messages stored; a freeze beyond it is temp-failed, never lost."},
	{Name: "quarantine.max_age", Default: `"14d"`, Doc: "Held and frozen mail older than this is handled by expire_action; \"0s\" keeps entries forever."},
	{Name: "quarantine.reinject_addr", Default: `"127.0.0.1:10026"`, Doc: "SMTP listener thawed frozen mail is sent to: an MTA port without milters or policy checks."},
	{Name: "quarantine.reinject_helo", Default: `"ratelimitd.localhost"`, Doc: "EHLO name used for re-injection."},
	{Name: "quarantine.release_command", Default: `[["postsuper", "-H", "{queue_id}"], ["postqueue", "-i", "{queue_id}"]]`, Doc: "Releases held mail; one command or a list run in order (the first decides success). Exim: [\"exim\", \"-Mt\", \"{queue_id}\"]."},
	{Name: "quarantine.delete_command", Default: `["postsuper", "-d", "{queue_id}"]`, Doc: "Deletes held mail. Exim: [\"exim\", \"-Mrm\", \"{queue_id}\"]."},
	{Name: "quarantine.show_command", Default: `["postcat", "-q", "{queue_id}"]`, Doc: "Prints held mail for quarantine show."},
	{Name: "quarantine.queue_list_command", Default: `["postqueue", "-j"]`, Doc: "Lists the MTA's queue (postqueue -j JSON lines, or Exim's [\"exim\", \"-bp\"]): each held message's queue ID is confirmed there (sender, recipients, arrival) before any command runs on it, and mail held at its first RCPT is found there. [] disables it: held mail is then never acted on."},
	{Name: "quarantine.expire_action", Default: `"bounce"`, Doc: "Past max_age: bounce (frozen mail gets a DSN, held mail expire_command) or keep (flagged until an operator acts)."},
	{Name: "quarantine.expire_command", Default: `[["postsuper", "-f", "{queue_id}"], ["postqueue", "-i", "{queue_id}"]]`, Doc: "Returns held mail past max_age to its sender; one command or a list."},
	{Name: "quarantine.alert_every", Default: `10`, Unit: "messages", Doc: "Logs (and notifies) \"KEY has N quarantined messages\" at each multiple of this count."},

	{Name: "milter.listen", DefaultNote: `"": disabled`, Doc: "\"host:port\" (loopback unless server.allow_networks) or \"unix:/path\"; e.g. \"127.0.0.1:10032\"."},
	{Name: "milter.read_timeout", Default: `"330s"`, Doc: "Closes a milter connection silent for that long."},
	{Name: "milter.max_message_size", Default: `"64M"`, Unit: "bytes", Doc: "Largest message the milter keeps to freeze (256 KiB in memory, the rest spooled); a bigger one that must be frozen is temp-failed."},

	{Name: "notify.events", DefaultNote: "all", Doc: "Event kinds sent: limit_refused, quarantine_threshold, thawed, deleted, expired, released, rate_reset."},
	{Name: "notify.queue_size", Default: `1000`, Unit: "events", Doc: "Bound on events waiting to be sent; more are dropped and counted."},
	{Name: "notify.max_keys", Default: `100000`, Unit: "(limit, key) pairs", Doc: "Bound on the pairs remembered for one limit_refused per key, limit and period; when full, first refusals are dropped and counted."},
	{Name: "notify.webhook.url", Doc: "http or https endpoint; \"\" disables the webhook."},
	{Name: "notify.webhook.secret", Doc: "Signs each body: X-Ratelimitd-Signature is \"sha256=\" and the hex HMAC-SHA256 of the body."},
	{Name: "notify.webhook.timeout", Default: `"10s"`, Doc: "Bound on one attempt."},
	{Name: "notify.webhook.attempts", Default: `5`, Unit: "attempts", Doc: "Tries per event (network errors, 408, 429 and 5xx are retried) before it is counted as failed."},
	{Name: "notify.webhook.backoff", Default: `"1s"`, Doc: "Wait after the first failed attempt, doubled after each further one."},
	{Name: "notify.webhook.max_backoff", Default: `"1m"`, Doc: "Longest wait between attempts."},
	{Name: "notify.mail.relay", Default: `"127.0.0.1:25"`, Doc: "SMTP relay host:port."},
	{Name: "notify.mail.helo", Default: `"localhost"`, Doc: "EHLO name."},
	{Name: "notify.mail.starttls", DefaultNote: "false", Doc: "Requires STARTTLS on the relay, verifying its certificate against the relay host name."},
	{Name: "notify.mail.from", DefaultNote: "required when to is set", Doc: "Header and envelope sender, e.g. \"ratelimitd@mail.example.org\"."},
	{Name: "notify.mail.to", Default: `[]`, Doc: "Postmaster addresses; empty disables mail."},
	{Name: "notify.mail.subject", Default: defaultSubject, Doc: "Subject template (Go text/template over the event)."},
	{Name: "notify.mail.body", DefaultNote: "the summary, the event's fields and the commands to review and forgive", Doc: "Body template (Go text/template over the event)."},
	{Name: "notify.mail.notify_sender", DefaultNote: "false", Doc: "Also mails the sender of a refused message; only where senders are authenticated."},
	{Name: "notify.mail.sender_subject", Default: defaultSenderSubject, Doc: "Subject template of the mail to the sender."},
	{Name: "notify.mail.sender_body", DefaultNote: "says the mail is limited and what to do if the sender did not send it", Doc: "Body template of the mail to the sender."},
	{Name: "notify.mail.timeout", Default: `"30s"`, Doc: "Bound on one SMTP transaction."},
	{Name: "notify.mail.attempts", Default: `5`, Unit: "attempts", Doc: "Tries per mail (network errors and 4xx are retried) before it is counted as failed."},
	{Name: "notify.mail.backoff", Default: `"1s"`, Doc: "Wait after the first failed attempt, doubled after each further one."},
	{Name: "notify.mail.max_backoff", Default: `"1m"`, Doc: "Longest wait between attempts."},

	{Name: "web.listen", DefaultNote: `"": disabled`, Doc: "Numeric \"host:port\" of the console, e.g. \"127.0.0.1:9732\"; not loopback only with tls_cert and tls_key."},
	{Name: "web.tls_cert", Doc: "PEM certificate (chain) file; with tls_key the console serves HTTPS and its cookie is Secure."},
	{Name: "web.tls_key", Doc: "PEM private key file for tls_cert."},
	{Name: "web.users_file", DefaultNote: "STATE_DIR/web-users", Doc: "Console users, roles (viewer, operator) and argon2id hashes; managed by `ratelimitd web user add|remove`."},

	{Name: "events.enabled", Default: `true`, Doc: "Records every refusal, warning, quarantine action, rate reset, suspend/resume and reload; written behind the answer to the MTA, like the rate state."},
	{Name: "events.max_age", Default: `"30d"`, Doc: "Events older than this are deleted (at least 1m)."},
	{Name: "events.max_count", Default: `1000000`, Unit: "events", Doc: "Beyond this many events the oldest are deleted (about 140 bytes of state file each)."},
}

// WriteReference writes the configuration reference (docs/configuration.md)
// as Markdown: per table, every key with its type, default, unit, whether
// SIGHUP applies it, and what it does.
func WriteReference(w io.Writer) error {
	types := map[string]string{}
	for _, k := range FileKeys() {
		types[k.Name] = TypeName(k.Type)
	}
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated by "ratelimitd config reference" from package config; do not edit. -->

Every key of ratelimitd's TOML configuration file
([configs/ratelimitd.toml](../configs/ratelimitd.toml) is the commented
example and the embedded default). An unknown key is an error;
` + "`ratelimitd config check FILE`" + ` reports every problem with its key.

- **duration**: "90s", "15m", "1h", "1h30m", "24h", "7d", "4w".
- **size**: bytes as an integer, or "512K", "10M", "2G" (powers of 1024).
- **SIGHUP**: "yes" when a reload (SIGHUP, ` + "`systemctl reload ratelimitd`" + `)
  applies the key at once; "restart" when the running value is kept until
  the daemon restarts (the reload logs the key, and ` + "`ratelimitd status`" + `
  shows "restart needed to apply").
`)
	for _, t := range Tables {
		heading := "[" + t.Name + "]"
		if t.Name == "limit" {
			heading = "[[limit]]"
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", heading, t.Doc)
		b.WriteString("| key | type | default | unit | SIGHUP | description |\n|---|---|---|---|---|---|\n")
		for _, k := range Keys {
			table, key := splitKey(k.Name)
			if table != t.Name {
				continue
			}
			typ, ok := types[k.Name]
			if !ok {
				return fmt.Errorf("config: reference key %s is not in the configuration structs", k.Name)
			}
			reload := "restart"
			if AppliedBySIGHUP(k.Name) {
				reload = "yes"
			}
			def := ""
			if k.Default != "" {
				def = "`" + k.Default + "`"
			}
			switch {
			case def != "" && k.DefaultNote != "":
				def += " (" + k.DefaultNote + ")"
			case k.DefaultNote != "":
				def = k.DefaultNote
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n",
				key, typ, cell(def), cell(k.Unit), reload, cell(k.Doc))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// splitKey splits "notify.webhook.url" into its table and key.
func splitKey(name string) (table, key string) {
	i := strings.LastIndexByte(name, '.')
	return name[:i], name[i+1:]
}

// cell escapes text for a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
