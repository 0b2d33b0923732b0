// Package policy is sandgate's policy engine: OPA/Rego evaluated in-process
// through prepared queries, with a default policy embedded in the binary.
//
// # Three decisions
//
// The gateway asks three questions, each answered by one Rego package:
//
//   - [Engine.Access] (package sandgate.access): may this principal perform
//     this action on this resource? Evaluates data.sandgate.access.decision.
//   - [Engine.Admit] (package sandgate.admission): may this create request
//     (one sandbox or a batch) run under the tenant's quotas? Evaluates
//     data.sandgate.admission.deny, a set of {code, message}.
//   - [Engine.Egress] (package sandgate.egress): which egress rules does this
//     sandbox really get? Evaluates data.sandgate.egress.decision.
//
// Every answer is a [Decision] carrying a stable code, a user-safe message,
// a decision id and the hash of the input, so that the audit stream can name
// exactly what was decided on what.
//
// # Fail closed
//
// An evaluation error, an undefined result or a result of the wrong shape
// denies, with code [CodeEvaluationFailed]; the cause stays in
// [Decision.Cause] for logs and never reaches a user.
//
// # Operator policy: the override rule
//
// The default modules live in rego/ and are embedded. When [Options.Dir] is
// set, every .rego file below it is loaded in addition to the defaults
// (files ending in _test.rego only by [RunTests]), and every .json, .yaml or
// .yml file is loaded as data at the path of its directory, as `opa eval -d`
// does: dir/sandgate/platform/x.json becomes data.sandgate.platform.
// Hidden files and directories (a leading dot) are skipped.
//
// An operator module replaces a default one when both have the same package
// and the same file name: dir/access.rego (or dir/any/sub/access.rego) with
// `package sandgate.access` replaces the default access.rego. Any other
// operator module is added beside the defaults; a module of a default
// package with another file name adds rules to that package, which is how
// operators extend the default policy without copying it (see README.md).
//
// Platform data given in [Options.Data] is mounted at data.sandgate.platform
// and wins over data files at the same keys. The keys the default policy
// reads are listed in README.md.
//
// # Egress default
//
// A sandbox created without a networkPolicy gets defaultAction
// data.sandgate.platform.default_action ("deny" unless the operator says
// otherwise) with only the platform rules: link-local and metadata ranges
// (169.254.0.0/16, fe80::/10), the gateway's own addresses and the
// operator's always_deny targets denied, then the operator's always_allow
// targets allowed. A requested policy keeps its own rules after those.
//
// # Versions and hot reload
//
// Each successful load compiles the modules once and prepares the three
// queries once; evaluation only runs prepared queries. [Engine.Watch] polls
// the directory and reloads on change; [Engine.Reload] reloads on demand. A
// load that fails to parse or compile, or that lacks one of the three entry
// points, is refused and logged, and the previous version keeps serving.
// [Engine.Validate], [Engine.SetModule] and [Engine.RemoveModule] serve a
// policy editor; [RunTests] and [EvalOnce] serve the CLI and playground.
//
// # Overrides
//
// [Engine.SetOverrides] lays modules kept outside the directory (the gateway
// stores them in Redis for its policy API) over the directory, by the same
// override rule; they win over a directory file of the same name and survive
// reloads. [Engine.Check], [Engine.ExplainWith] and [Engine.TestWith] compile,
// evaluate and test the policy in force with unsaved sources laid over it,
// without changing it.
package policy
