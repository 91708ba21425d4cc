package config

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
)

// A key is the one place a configuration key is documented; its type and
// whether SIGHUP applies it come from fileKeys and restartTables.
type key struct {
	name string // "table.key"; a [[limit]] key is "limit.KEY"
	def  string // default as a TOML value, "" if none can be written
	note string // a default computed or applied elsewhere
	unit string // what a number counts
	doc  string // one line: what the key does
}

var tables = []struct{ Name, Doc string }{
	{"server", "Where the daemon listens and keeps its state."},
	{"policy", "What is limited: client subnets, the warn header, the no-limits switch."},
	{"policy.exempt", "Who is never limited."},
	{"limit", "One `[[limit]]` table per limit, an ordered list: of the limits over a request, the first in file order whose action answers (`hold`, `freeze`, `defer`, `reject`; `warn` is a dry run) decides (docs/limits.md, \"Escalation\"). At least one is required unless `[policy] limits = \"none\"`."},
	{"store", "Where rate state lives: this host (memory and the BoltDB file) or Redis, shared by several MTAs (docs/redis.md)."},
	{"quarantine", "Held and frozen mail: storage, release, expiry (docs/operations.md). In a command, `{queue_id}` is replaced by the message's queue ID, always a valid Postfix or Exim queue ID; commands run without a shell."},
	{"milter", "The milter front end, needed to freeze (docs/postfix.md)."},
	{"notify", "Notifications to the postmaster; off until `webhook.url` or `mail.to` is set."},
	{"notify.webhook", "One signed JSON object per event, POSTed."},
	{"notify.mail", "Mail to the postmaster (and optionally the sender) through an SMTP relay."},
	{"web", "The browser console (docs/console.md); off until `listen` is set. SIGHUP rereads the users file and the TLS files."},
	{"outcome", "The outcome feed that outcome limits (`per = \"bounce\"`, `\"unknown_rcpt\"`, `\"deferral\"`) count: what happened to each sender's mail, joined by queue ID to the request that submitted it (docs/limits.md, \"Outcome limits\")."},
	{"events", "The history of refusals, warnings, quarantine and operator actions, and reloads in the state file (`ratelimitd events`, docs/operations.md)."},
}

// keys documents every key of the file, in reference order; withDefaults
// applies each def.
var keys = []key{
	{name: "server.policy_listen", def: `["127.0.0.1:10031"]`, doc: "Policy delegation listeners: \"host:port\" (loopback unless allow_networks is set) or \"unix:/path\", e.g. \"unix:/var/spool/postfix/private/ratelimitd\". A socket systemd passes (socket activation) for one of these addresses is used as it is; the others are opened by the daemon."},
	{name: "server.socket_mode", def: `"0660"`, unit: "octal permission", doc: "Permission of unix policy and milter sockets; world-writable modes are refused."},
	{name: "server.socket_group", note: "the daemon's group", doc: "Group of unix policy and milter sockets, e.g. \"postfix\" (Postfix connects as a member of it)."},
	{name: "server.user", note: "no change of user", doc: "User the daemon runs as, like Postfix's mail_owner: started as root it opens its listeners (the socket in Postfix's private/ too), the log file and the state file, then drops to this user and its groups for good. The state directory must be this user's. Ignored when not started as root."},
	{name: "server.group", note: "the user's primary group", doc: "Group the daemon runs as, with server.user (the user's other groups are kept, e.g. postdrop for postqueue)."},
	{name: "server.allow_networks", def: `[]`, note: "loopback only", doc: "Client networks (addresses or prefixes) TCP listeners accept; others are closed before anything is read."},
	{name: "server.state_dir", note: "/var/lib/ratelimitd as root, ./ratelimitd-state otherwise", doc: "Directory of the BoltDB file (rate state and quarantine) and, by default, the admin socket."},
	{name: "server.admin_socket", note: "STATE_DIR/admin.sock", doc: "Admin unix socket the CLI talks to; its directory must not be world-writable."},
	{name: "server.metrics_listen", def: `"127.0.0.1:9731"`, doc: "Prometheus /metrics address (numeric host:port); \"\" disables it."},
	{name: "server.flush_interval", def: `"1s"`, doc: "How often rate state is written to BoltDB: a crash loses at most this much counting (at most 1m)."},
	{name: "server.max_keys", note: "4000000", unit: "(limit, key) pairs", doc: "Bound on tracked rate states; the least recently seen are evicted first, never one at or above half its limit."},
	{name: "server.idle_timeout", def: `"330s"`, doc: "Closes a policy connection idle that long (above Postfix's smtpd_policy_service_max_idle of 300s)."},
	{name: "server.request_timeout", def: `"10s"`, doc: "Bound on reading and answering one request, from its first byte."},
	{name: "server.first_request_timeout", def: `"10s"`, doc: "Closes a policy connection that has sent no complete request this long after it was accepted (Postfix and Exim send theirs at once)."},
	{name: "server.max_connections", note: "0: min(1024, RLIMIT_NOFILE/2)", unit: "connections", doc: "Cap on policy connections open at once (the milter has its own). At the cap a new connection closes the connection idle longest; if every one is in a request, the new one is closed at once. Each is counted (docs/limits.md)."},
	{name: "server.max_connections_per_client", note: "0: min(256, max_connections)", unit: "connections", doc: "Cap on policy connections open at once from one TCP client address, applied the same way; size it above the MTA host's smtpd processes (Postfix's default_process_limit, 100)."},
	{name: "server.log_level", def: `"info"`, doc: "debug, info, warn or error."},
	{name: "server.log_format", def: `"text"`, doc: "text or json."},

	{name: "policy.subnet_v4", note: "24", unit: "prefix bits", doc: "Prefix length of the client_subnet key for IPv4 clients (1 to 32)."},
	{name: "policy.subnet_v6", note: "64", unit: "prefix bits", doc: "Prefix length of the client_subnet key for IPv6 clients (1 to 128)."},
	{name: "policy.address_case", note: `"fold"`, doc: "fold: the local part of addresses is lower-cased in rate keys (Alice@x and alice@x are one key); keep: as sent. Domains are always lower-cased (IDNA ASCII form). docs/keys.md."},
	{name: "policy.recipient_delimiter", note: `"+"`, doc: "Characters that start an address extension, removed from rate keys as Postfix's recipient_delimiter (alice+news@x is alice@x); \"\" keeps extensions."},
	{name: "policy.ipv4_prefix", note: "32", unit: "prefix bits", doc: "Prefix length a client_address key is masked to for IPv4 clients (8 to 32); IPv4-mapped IPv6 clients count as IPv4."},
	{name: "policy.ipv6_prefix", note: "64", unit: "prefix bits", doc: "Prefix length a client_address key is masked to for IPv6 clients (32 to 128): one customer network is one key."},
	{name: "policy.nat64_prefixes", def: `[]`, doc: "NAT64 prefixes besides 64:ff9b::/96 (RFC 6052: /32, /40, /48, /56, /64 or /96): a client inside one is keyed by the IPv4 address it carries, as are IPv4-compatible, Teredo and 6to4 clients. docs/keys.md."},
	{name: "policy.on_full", note: `"defer"`, doc: "Answer to a new sender when the key table (server.max_keys) is full of keys over or near their limit, which are never evicted: defer (450 4.7.1, logged and counted as a fault) or dunno (let it through unmeasured)."},
	{name: "policy.warn_header", note: `"X-Ratelimitd-Warning"`, doc: "Header a warn limit prepends; \"\" means warn only logs."},
	{name: "policy.limits", doc: "\"none\" runs without any [[limit]] on purpose; without it a file with no [[limit]] is refused."},
	{name: "policy.exempt.networks", def: `[]`, doc: "Client addresses or prefixes never limited."},
	{name: "policy.exempt.users", def: `[]`, doc: "SASL user names never limited (case-insensitive)."},
	{name: "policy.exempt.senders", def: `[]`, doc: "Envelope senders (\"news@example.org\") or domains (\"@example.org\") never limited (case-insensitive)."},

	{name: "limit.name", note: "required", doc: "Names the limit in logs, metrics and the CLI: [a-z0-9_-], unique."},
	{name: "limit.key", note: "required", doc: "Request attributes joined into the rate key: sasl_username, sender, sender_domain, client_address, client_subnet, client_name, helo_name, recipient, recipient_domain, local_user (the uid of a local sendmail submission; docs/postfix.md, \"Local submissions\")."},
	{name: "limit.limit", note: "required (baseline: cap)", unit: "cost per period", doc: "Permitted cost per period; also the burst a quiet sender may send at once. At most 1e15; at least 1 except per = \"byte\" (and earrrl)."},
	{name: "limit.period", note: "required", doc: "Averaging period, e.g. \"1h\", \"24h\"; 1s to 366d."},
	{name: "limit.per", note: `"mail"`, doc: "Cost unit: mail, rcpt, byte, conn, or addr (1 per recipient not sent to within the period); or an outcome of the sender's mail, counted when it arrives from an outcome feed: bounce (1 per recipient failed with 5.x.x), unknown_rcpt (5.1.0, 5.1.1, 5.1.10) or deferral (1 per recipient deferred, however often retried). When an outcome limit is over, the sender's next messages get its action."},
	{name: "limit.ratio", note: "none", doc: "An outcome limit's ratio form, instead of limit: over when more than this share of the sender's recipients failed (0.1: 10%), measured once min_count recipients were counted; failures and recipients are both exponential rates over the period (docs/limits.md, \"The ratio form\")."},
	{name: "limit.min_count", note: "required with ratio", unit: "recipients per period", doc: "The ratio form: the recipients (of messages whose outcomes the feeds see) a sender must have in the period before the ratio is applied."},
	{name: "limit.mode", note: `"leaky"`, doc: "leaky (refused attempts not counted), strict (every attempt counts), forgiving (counted, clamped to the limit) or readonly (measure only)."},
	{name: "limit.action", note: `"defer"`, doc: "Over the limit: defer (450), reject (550), warn (header), hold (MTA hold queue) or freeze (milter quarantine)."},
	{name: "limit.algorithm", note: `"exponential"`, doc: "exponential (Exim's EWMA), gcra, cooldown, earrrl or baseline (relative to the key's learned peak)."},
	{name: "limit.factor", note: "3 (baseline only)", doc: "Baseline: a key is refused above factor times its learned typical peak."},
	{name: "limit.floor", note: "required with baseline", unit: "cost per period", doc: "Baseline: the allowance of a key with no history, and the least any key gets."},
	{name: "limit.cap", note: "limit (baseline only)", unit: "cost per period", doc: "Baseline: the most any key gets."},
	{name: "limit.learn_period", note: `"4w" (baseline only)`, doc: "Baseline: a key's learned peak is forgotten by 1/e per learn_period."},
	{name: "limit.half_life", note: "period × ln 2 (earrrl only)", doc: "EARRRL's half-life."},
	{name: "limit.message", note: `"rate limit exceeded: {rate} per {period} (limit {limit}); try again in {retry}"`, doc: "Client text template; placeholders {name}, {key}, {rate}, {limit}, {period}, {retry}."},
	{name: "limit.overrides", unit: "cost per period", doc: "Per-key limits, e.g. { news = 5000, \"@partner.example\" = 500 } (\"@domain\": default of that domain's addresses); with baseline, a fixed allowance."},
	{name: "limit.via", note: "both", doc: "Front ends this limit measures: \"policy\" and/or \"milter\"; give each limit one when an MTA asks through both."},
	{name: "limit.auto_release", note: `"none"`, doc: "\"drip\" releases a key's held/frozen mail oldest first at the limit's rate once it is back under it (hold and freeze limits)."},

	{name: "store.backend", def: `"local"`, doc: "local (memory and the BoltDB file) or redis."},
	{name: "store.redis_addrs", def: `["127.0.0.1:6379"]`, doc: "host:port: one for a standalone Redis, several for a Redis Cluster, the Sentinels when redis_sentinel_master is set."},
	{name: "store.redis_sentinel_master", doc: "Master set name the Sentinels monitor; set, redis_addrs are the Sentinels."},
	{name: "store.redis_username", doc: "Redis AUTH user name."},
	{name: "store.redis_password", doc: "Redis AUTH password."},
	{name: "store.redis_db", note: "0", unit: "database number", doc: "Redis SELECT database."},
	{name: "store.redis_tls", note: "false", doc: "Use TLS (system roots) for every Redis connection."},
	{name: "store.redis_timeout", def: `"200ms"`, doc: "Bound on each request's Redis round trip; past it on_redis_error applies."},
	{name: "store.on_redis_error", def: `"local"`, doc: "When Redis fails: local (decide from this host's copy of the states Redis returned; add what it counted to Redis once on recovery), dunno or defer (docs/redis.md)."},
	{name: "store.degraded_share", def: `"last"`, doc: "With on_redis_error = local: last (each host may use the whole limit from the state it last knew) or split (each host gets limit/redis_hosts while degraded; needs redis_hosts of 2 or more)."},
	{name: "store.redis_hosts", def: "1", unit: "hosts", doc: "How many hosts share the Redis state: the N of degraded_share = split, which refuses 1."},
	{name: "store.redis_known_records", note: "0 (114,688)", unit: "records", doc: "Rate keys whose Redis record each host remembers for the fast path (the host decides, the script only confirms; about 100 bytes each; docs/redis.md). 0: the default; -1: no fast path, the script decides every request."},
	{name: "store.key_prefix", def: `"ratelimitd:"`, doc: "Starts every Redis key; must not contain '{' or '}'."},

	{name: "quarantine.max_size", def: `"2G"`, unit: "bytes", doc: "Bound on the bytes of frozen messages stored; a freeze beyond it is temp-failed, never lost."},
	{name: "quarantine.max_age", def: `"14d"`, doc: "Held and frozen mail older than this is handled by expire_action; \"0s\" keeps entries forever."},
	{name: "quarantine.keep_thawed", def: `"7d"`, doc: "A thawed frozen message's body is kept this long, so quarantine thaw --again ID can send it once more (a thaw to the wrong place); swept at the next expiry run after. \"0s\": swept at the next run."},
	{name: "quarantine.reinject_addr", def: `"127.0.0.1:10026"`, doc: "SMTP listener thawed frozen mail is sent to: an MTA port without milters or policy checks."},
	{name: "quarantine.reinject_helo", def: `"ratelimitd.localhost"`, doc: "EHLO name used for re-injection."},
	{name: "quarantine.release_command", def: `[["postsuper", "-H", "{queue_id}"], ["postqueue", "-i", "{queue_id}"]]`, doc: "Releases held mail; one command or a list run in order (the first decides success). Exim: [\"exim\", \"-Mt\", \"{queue_id}\"]."},
	{name: "quarantine.delete_command", def: `["postsuper", "-d", "{queue_id}"]`, doc: "Deletes held mail. Exim: [\"exim\", \"-Mrm\", \"{queue_id}\"]."},
	{name: "quarantine.show_command", def: `["postcat", "-q", "{queue_id}"]`, doc: "Prints held mail for quarantine show."},
	{name: "quarantine.queue_list_command", def: `["postqueue", "-j"]`, doc: "Lists the MTA's queue (postqueue -j JSON lines, or Exim's [\"exim\", \"-bp\"]): each held message's queue ID is confirmed there (sender, recipients, arrival) before any command runs on it, and mail held at its first RCPT is found there. [] disables it: held mail is then never acted on."},
	{name: "quarantine.expire_action", def: `"bounce"`, doc: "Past max_age: bounce (frozen mail gets a DSN, or is deleted if its sender is <>; held mail expire_command) or keep (flagged until an operator acts)."},
	{name: "quarantine.expire_command", def: `[["postsuper", "-f", "{queue_id}"], ["postqueue", "-i", "{queue_id}"]]`, doc: "Returns held mail past max_age to its sender; one command or a list."},
	{name: "quarantine.alert_every", def: `10`, unit: "messages", doc: "Logs (and notifies) \"KEY has N quarantined messages\" at each multiple of this count."},

	{name: "milter.listen", note: `"": disabled`, doc: "\"host:port\" (loopback unless server.allow_networks) or \"unix:/path\"; e.g. \"127.0.0.1:10032\"."},
	{name: "milter.read_timeout", def: `"330s"`, doc: "Closes a milter connection silent for that long."},
	{name: "milter.first_request_timeout", def: `"10s"`, doc: "Closes a milter connection that has sent no complete packet this long after it was accepted (the MTA sends its option negotiation at once)."},
	{name: "milter.max_connections", note: "0: min(1024, RLIMIT_NOFILE/4)", unit: "connections", doc: "Cap on milter connections open at once, apart from the policy service's; at the cap a connection waiting between messages gives way to a new one, as for server.max_connections."},
	{name: "milter.max_connections_per_client", note: "0: min(256, max_connections)", unit: "connections", doc: "Cap on milter connections open at once from one TCP client address."},
	{name: "milter.max_message_size", def: `"64M"`, unit: "bytes", doc: "Largest message the milter keeps to freeze (256 KiB in memory, the rest spooled); a bigger one that must be frozen is temp-failed."},

	{name: "notify.events", note: "all", doc: "Event kinds sent: limit_refused, quarantine_threshold, thawed, deleted, expired, released, rate_reset."},
	{name: "notify.queue_size", def: `1000`, unit: "events", doc: "Bound on events waiting to be sent; more are dropped and counted."},
	{name: "notify.max_keys", def: `100000`, unit: "(limit, key) pairs", doc: "Bound on the pairs remembered for one limit_refused per key, limit and period; when full, first refusals are dropped and counted."},
	{name: "notify.webhook.url", doc: "http or https endpoint; \"\" disables the webhook."},
	{name: "notify.webhook.secret", doc: "Signs each body: X-Ratelimitd-Signature is \"sha256=\" and the hex HMAC-SHA256 of the body."},
	{name: "notify.webhook.timeout", def: `"10s"`, doc: "Bound on one attempt."},
	{name: "notify.webhook.attempts", def: `5`, unit: "attempts", doc: "Tries per event (network errors, 408, 429 and 5xx are retried) before it is counted as failed."},
	{name: "notify.webhook.backoff", def: `"1s"`, doc: "Wait after the first failed attempt, doubled after each further one."},
	{name: "notify.webhook.max_backoff", def: `"1m"`, doc: "Longest wait between attempts."},
	{name: "notify.mail.relay", def: `"127.0.0.1:25"`, doc: "SMTP relay host:port."},
	{name: "notify.mail.helo", def: `"localhost"`, doc: "EHLO name."},
	{name: "notify.mail.starttls", note: "false", doc: "Requires STARTTLS on the relay, verifying its certificate against the relay host name."},
	{name: "notify.mail.from", note: "required when to is set", doc: "Header and envelope sender, e.g. \"ratelimitd@mail.example.org\"."},
	{name: "notify.mail.to", def: `[]`, doc: "Postmaster addresses; empty disables mail."},
	{name: "notify.mail.subject", def: strconv.Quote(notify.DefaultSubject), doc: "Subject template (Go text/template over the event)."},
	{name: "notify.mail.body", note: "the summary, the event's fields and the commands to review and forgive", doc: "Body template (Go text/template over the event)."},
	{name: "notify.mail.notify_sender", note: "false", doc: "Also mails the sender of a refused message; only where senders are authenticated."},
	{name: "notify.mail.sender_subject", def: strconv.Quote(notify.DefaultSenderSubject), doc: "Subject template of the mail to the sender."},
	{name: "notify.mail.sender_body", note: "says the mail is limited and what to do if the sender did not send it", doc: "Body template of the mail to the sender."},
	{name: "notify.mail.timeout", def: `"30s"`, doc: "Bound on one SMTP transaction."},
	{name: "notify.mail.attempts", def: `5`, unit: "attempts", doc: "Tries per mail (network errors and 4xx are retried) before it is counted as failed."},
	{name: "notify.mail.backoff", def: `"1s"`, doc: "Wait after the first failed attempt, doubled after each further one."},
	{name: "notify.mail.max_backoff", def: `"1m"`, doc: "Longest wait between attempts."},

	{name: "web.listen", note: `"": disabled`, doc: "Numeric \"host:port\" of the console, e.g. \"127.0.0.1:9732\"; not loopback only with tls_cert and tls_key."},
	{name: "web.tls_cert", doc: "PEM certificate (chain) file; with tls_key the console serves HTTPS and its cookie is Secure."},
	{name: "web.tls_key", doc: "PEM private key file for tls_cert."},
	{name: "web.trusted_proxies", def: `[]`, note: "none", doc: "Reverse proxies (addresses or prefixes) whose X-Forwarded-For gives the client address failed logins count against and whose X-Forwarded-Proto https makes cookies Secure; from any other peer, loopback included, both headers are ignored."},
	{name: "web.users_file", note: "STATE_DIR/web-users", doc: "Console users, roles (viewer, operator) and argon2id hashes; managed by `ratelimitd web user add|remove`."},

	{name: "outcome.maillog", def: `""`, note: "off", doc: "Postfix mail log to follow for outcomes (maillog_file, or syslog's /var/log/mail.log), across rotation (the rotated file is PATH.1) and restarts; \"\" disables the feed. The daemon must be able to read it."},
	{name: "outcome.notices_listen", def: `""`, note: "off", doc: "Loopback host:port of the LMTP listener for Postfix's postmaster notices (notify_classes = bounce, delay; bounce_notice_recipient and delay_notice_recipient routed to lmtp:inet:HOST:PORT, docs/limits.md); \"\" disables it."},
	{name: "outcome.exim_listen", def: `""`, note: "off", doc: "Loopback host:port that Exim's transport event_action sends delivery failures and deferrals to with ${readsocket} (docs/exim.md); \"\" disables it."},
	{name: "outcome.lifetime", def: `"5d"`, doc: "How long a queue ID stays joined to its submission (Postfix's maximal_queue_lifetime); outcomes later than that are not counted (at least 1h)."},
	{name: "outcome.max_messages", def: `500000`, unit: "queue IDs", doc: "Bound on the messages joined at a time (about 100 bytes each, also in the state file); a message submitted while it is full is not counted, and logged."},
	{name: "outcome.poll", def: `"1s"`, doc: "How often the mail log is looked at for new lines and rotation (10ms to 1m)."},
	{name: "events.enabled", def: `true`, doc: "Records every refusal, warning, quarantine action, rate reset, suspend/resume and reload; written behind the answer to the MTA, like the rate state."},
	{name: "events.max_age", def: `"30d"`, doc: "Refusals and warnings older than this are deleted (at least 1m)."},
	{name: "events.max_count", def: `1000000`, unit: "events", doc: "Beyond this many refusal and warning events the oldest are deleted (about 165 bytes of state file each; whatever the mail holds at most 2,130 bytes of record and 4,260 of pages); operator actions are never pruned by them."},
	{name: "events.actions_max_age", def: `"365d"`, doc: "Quarantine and operator actions (thaw, delete, expire, release, reset, suspend, resume) and reloads older than this are deleted (at least 1m)."},
	{name: "events.actions_max_count", def: `100000`, unit: "events", doc: "Beyond this many quarantine and operator action and reload events the oldest are deleted."},
	{name: "events.coalesce", def: `"1m"`, doc: "The refusals (or warnings) of one key by one limit with one action within one such interval (aligned to the clock) are one event with a count, first and last time (1s to 1d)."},
}

// fileKeys maps every key the file accepts to its Go type.
func fileKeys() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	walkKeys(reflect.ValueOf(File{Limits: make([]policy.LimitConfig, 1)}), "", func(name string, v reflect.Value) {
		out[strings.Replace(name, "limit[0].", "limit.", 1)] = v.Type()
	})
	return out
}

// leafTypes are struct or slice types that decode from one TOML value.
var leafTypes = map[reflect.Type]bool{
	reflect.TypeFor[policy.KeyList](): true,
	reflect.TypeFor[Commands]():       true,
}

// walkKeys calls fn for every key of the struct value v, named
// "server.idle_timeout" or "limit[2].period"; an embedded struct's keys
// belong to the embedding table.
func walkKeys(v reflect.Value, prefix string, fn func(name string, v reflect.Value)) {
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		switch {
		case !f.IsExported():
		case f.Anonymous && name == "":
			walkKeys(fv, prefix, fn)
		case name == "" || name == "-":
		case fv.Kind() == reflect.Struct && !leafTypes[fv.Type()]:
			walkKeys(fv, prefix+name+".", fn)
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.Struct:
			for j := range fv.Len() {
				walkKeys(fv.Index(j), fmt.Sprintf("%s%s[%d].", prefix, name, j), fn)
			}
		default:
			fn(prefix+name, fv)
		}
	}
}

var typeNames = map[reflect.Type]string{
	reflect.TypeFor[policy.Duration](): "duration",
	reflect.TypeFor[policy.Size]():     "size",
	reflect.TypeFor[policy.KeyList]():  "string or list of strings",
	reflect.TypeFor[Commands]():        "command or list of commands",
}

// typeName is how the reference names a key's type.
func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem() // set or not; same syntax
	}
	if n, ok := typeNames[t]; ok {
		return n
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "table of " + typeName(t.Elem()) + "s"
	}
	return t.String()
}

// restartTables are the tables a SIGHUP reload does not apply.
var restartTables = []string{"server", "quarantine", "milter", "notify", "store", "web", "events", "outcome"}

// RestartKeys lists, in table then field order, the keys of restartTables
// ("server.admin_socket") whose values differ between running and loaded,
// both validated; a reload keeps their running values.
func RestartKeys(running, loaded *File) []string {
	var keys []string
	ra, rb := reflect.ValueOf(*running), reflect.ValueOf(*loaded)
	for _, table := range restartTables {
		va, vb := tableField(ra, table), tableField(rb, table)
		for i := range va.NumField() {
			f := va.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
				keys = append(keys, table+"."+name)
			}
		}
	}
	return keys
}

// tableField is the field of the File value f whose toml tag is table.
func tableField(f reflect.Value, table string) reflect.Value {
	for i := range f.NumField() {
		if name, _, _ := strings.Cut(f.Type().Field(i).Tag.Get("toml"), ","); name == table {
			return f.Field(i)
		}
	}
	panic("config: no table " + table + " in File") // restartTables names File's fields
}

// appliedBySIGHUP reports whether a reload applies the key "table.key".
func appliedBySIGHUP(name string) bool {
	table, _, _ := strings.Cut(name, ".")
	return !slices.Contains(restartTables, table)
}

// WriteReference writes the configuration reference (docs/configuration.md)
// as Markdown: per table, every key with its type, default, unit, whether
// SIGHUP applies it, and what it does.
func WriteReference(w io.Writer) error {
	types := fileKeys()
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
	for _, t := range tables {
		heading := "[" + t.Name + "]"
		if t.Name == "limit" {
			heading = "[[limit]]"
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", heading, t.Doc)
		b.WriteString("| key | type | default | unit | SIGHUP | description |\n|---|---|---|---|---|---|\n")
		for _, k := range keys {
			table, name := splitKey(k.name)
			if table != t.Name {
				continue
			}
			typ, ok := types[k.name]
			if !ok {
				return fmt.Errorf("config: reference key %s is not in the configuration structs", k.name)
			}
			reload := "restart"
			if appliedBySIGHUP(k.name) {
				reload = "yes"
			}
			def := k.note
			switch {
			case k.def != "" && k.note != "":
				def = "`" + k.def + "` (" + k.note + ")"
			case k.def != "":
				def = "`" + k.def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n",
				name, typeName(typ), cell(def), cell(k.unit), reload, cell(k.doc))
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
