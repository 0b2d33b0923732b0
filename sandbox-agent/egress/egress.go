// Package egress is the sandbox's egress enforcer (`sandbox-agent egress`): an
// nftables table that drops every connection the policy does not allow, a DNS proxy
// that answers only allowed names and pins their addresses into that table, and the
// OpenSandbox egress API on port 18080.
//
// # Where it runs
//
// In the sandbox's network namespace with CAP_NET_ADMIN, while the workload sharing
// that namespace has neither NET_ADMIN nor NET_RAW. It shares nothing else with the
// workload: on Docker it is a sidecar container that joins the workload's network
// namespace only (`--network container:<workload>`, no shared PID namespace), on
// Kubernetes a native sidecar of a pod without shareProcessNamespace; the workload can
// neither see nor signal it. It uses netlink only (no nft or iptables binary).
//
// # Rules (table inet sandgate_egress)
//
// The output chain (policy drop) accepts established and related flows and the proxy's
// own queries to the upstream resolver, recognized by a socket mark (SO_MARK, which
// needs NET_ADMIN); it drops everything else to the upstream and to Docker's embedded
// resolver 127.0.0.11, on any port (ahead of the loopback accept), accepts loopback,
// drops port 53 that escaped the redirect (IPv6 DNS) and port 853 (DNS over TLS) to any
// address, then looks the destination up in the deny sets (drop), the allow sets
// (accept) and the sets of addresses pinned from DNS answers (accept), and ends in the
// default action. IP and CIDR rules keep "first match wins" because each rule only
// claims the addresses no earlier rule claimed (see ruleSet), which makes the allow
// and deny sets disjoint. An explicit IP deny, platform denies included, beats an
// address learned from an allowed name. A nat output chain, ordered before Docker's
// own, sends every IPv4 packet to port 53, UDP or TCP, whatever the resolver, to the
// proxy, so a workload cannot pick another resolver; only marked packets skip it.
//
// With --dns-servers (the sandbox's DNS servers, the ones Docker's embedded resolver
// forwards to), port-53 packets to those servers go instead to a second proxy
// (--dns-servers-listen) that applies the same policy, pins the same way and asks the
// servers itself, marked; the servers are closed to unmarked traffic on every port,
// like the upstream. The embedded resolver forwards the names it does not own from
// inside the sandbox's namespace, unmarked: sent to the main proxy, whose upstream it
// is, such a forward would loop. Through the second proxy an allowed name goes
// workload → proxy → (marked) 127.0.0.11 → forward → second proxy → (marked) server.
//
// Each policy change replaces the whole table in one netlink batch, which the kernel
// commits as one transaction: new connections see the new policy at once, and no
// packet sees a half-built table. DNS pins are single-batch set additions with a
// timeout of max(TTL, --min-ttl), capped by --max-ttl, made before the answer is sent.
//
// # Fail closed
//
// The table outlives the process: the enforcer never deletes it on exit unless run
// with --cleanup. If the proxy dies, DNS is still redirected to its dead port, so
// nothing resolves, and nothing but pinned addresses is reachable until their
// timeouts run out. A bad initial policy installs deny-all and exits non-zero. A
// policy that cannot be installed leaves the previous one in force (500). A pin that
// cannot be written turns the answer into SERVFAIL.
//
// A restarted enforcer takes the table over in the same atomic way and keeps the pins
// the previous one left whose names its policy still allows (each pin carries its name
// as the element's comment), so connections to addresses resolved before the restart
// go on working.
//
// # Container requirements
//
// The enforcer needs CAP_NET_ADMIN (nftables, SO_MARK) and the right to bind port 53
// (root, or CAP_NET_BIND_SERVICE), no sysctl, and no nft or iptables binary. The
// workload must have neither NET_ADMIN (it could rewrite the table or set the mark) nor
// NET_RAW (packet sockets bypass netfilter), must not be privileged, and must not
// share the enforcer's PID or mount namespace. It shares the network namespace, so
// 127.0.0.1:18080 is open to it; requests are signed (see API). Start the enforcer first and the workload once /healthz answers 200 (or the
// --ready-file exists). /etc/resolv.conf is read once and never rewritten: the
// redirect catches queries to any resolver, so the file stays as the runtime wrote it.
// On a Docker user-defined network the upstream is then Docker's embedded resolver
// 127.0.0.11: its own nat rules in the namespace send 127.0.0.11:53 to the resolver's
// real port, our nat chain runs before them, and our marked queries skip ours and take
// theirs. On the default bridge network the file names the host's resolvers, which the
// marked queries reach directly.
//
// # Policy
//
// The OpenSandbox shape: {"defaultAction":"allow"|"deny","egress":[{"action",
// "target"}]}; targets are host names ("example.com"), wildcards ("*.example.com",
// subdomains only), IP addresses and CIDR blocks. Names are lower-cased and lose a
// trailing dot; the first matching rule wins; a missing defaultAction is deny. Name
// rules decide DNS answers; IP rules decide addresses. Validation is strict (see
// ParsePolicy) and a rejected update leaves the policy unchanged.
//
// With defaultAction allow, denied names get NXDOMAIN and denied IPs are dropped, but
// an address reached without DNS, or a name resolved over DNS-over-HTTPS to an allowed
// address, cannot be told apart: deny mode is the one that holds against a hostile
// workload. Addresses shared by several names (CDNs) are allowed for all of them once
// one allowed name resolved to them.
//
// Reverse lookups are decided by the address they name (see reverse.go): non-public
// addresses and IP-denied ones get NXDOMAIN from the proxy itself, so the upstream never
// names other sandboxes of the runtime's network.
//
// # State
//
// With --state-file the policy in force is written there (atomically, before each
// change is installed) and a restarted enforcer installs it instead of the initial
// policy: a change made through the API survives kill -9. The file belongs in the
// enforcer's own filesystem, which the workload cannot reach.
//
// # API (default 0.0.0.0:18080)
//
// When $SANDGATE_EGRESS_TOKEN is set, every request must be signed with it (package
// egressauth: HMAC over method, path, body hash, timestamp and nonce; fresh, not
// replayed, not older than this process) and every answer is signed back; the token
// itself is never accepted (401 EGRESS::UNAUTHORIZED). The workload shares the
// namespace and could bind the port while the enforcer restarts: nothing the gateway
// sends is worth capturing, and the gateway believes no unsigned answer. GET /policy returns {status:"ok", mode
// (allow_all|deny_all|enforcing), enforcementMode:"dns+nft", policy, platformDeny}.
// POST and PUT replace the policy (an empty body, "{}" or "null" means deny-all);
// PATCH takes an array of rules (or {"egress":[...]}) merged ahead of the existing
// ones, replacing rules with the same target; DELETE takes an array of targets (or
// ?target=) and removes their rules. Every change answers like GET /policy. Errors are
// {code,message}: 400 EGRESS::INVALID_POLICY, 403 EGRESS::POLICY_DENIED, 405, 413,
// 500 EGRESS::APPLY_FAILED, 503 EGRESS::POLICY_HOOK_UNAVAILABLE. GET /healthz is 200
// {"status":"ok"} once the rules are installed and the proxy listens.
//
// # Gateway policy
//
// The gateway computes the effective rules with Rego and pushes them (initial policy
// or the API). So that a change made straight to this API cannot bypass that Rego,
// --policy-hook URL (token in $SANDGATE_EGRESS_POLICY_HOOK_TOKEN, sent as a Bearer
// token) makes every API change a question: the enforcer POSTs a HookRequest
// {operation, current, proposed} and applies the HookResponse's policy on 200, relays
// the message of a 403 {code,message} as 403 EGRESS::POLICY_DENIED, and keeps the
// current policy on any other outcome (fail closed). Without a hook it applies what it
// got. --platform-deny lists targets denied ahead of every policy, so no PUT or PATCH
// can reach them (the metadata service, the runtime's networks).
package egress
