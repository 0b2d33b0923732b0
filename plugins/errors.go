package plugins

import (
	"errors"
	"fmt"
	"strings"
)

// Error codes. They are stable: the gateway returns them to users as
// {"code","message"} and users match on them.
const (
	// CodeInvalidModule: the bytes are not a WebAssembly module wazero can compile.
	CodeInvalidModule = "PLUGIN::INVALID_MODULE"
	// CodeMissingExport: an export the ABI or a declared hook needs is absent.
	CodeMissingExport = "PLUGIN::MISSING_EXPORT"
	// CodeInvalidExport: an export exists with the wrong signature or kind.
	CodeInvalidExport = "PLUGIN::INVALID_EXPORT"
	// CodeForbiddenImport: the module imports something the host does not offer.
	CodeForbiddenImport = "PLUGIN::FORBIDDEN_IMPORT"
	// CodeABIVersion: sandgate_abi_version returned a version this host does not speak.
	CodeABIVersion = "PLUGIN::ABI_VERSION"
	// CodeInvalidConfig: the plugin's configuration is unusable (hooks, limits, settings).
	CodeInvalidConfig = "PLUGIN::INVALID_CONFIG"
	// CodeModuleTooLarge: the module exceeds the host's size limit.
	CodeModuleTooLarge = "PLUGIN::MODULE_TOO_LARGE"
	// CodeCompileTimeout: the module did not compile within the host's compile timeout.
	CodeCompileTimeout = "PLUGIN::COMPILE_TIMEOUT"
	// CodeTooManyPlugins: the tenant has as many plugins as the host allows.
	CodeTooManyPlugins = "PLUGIN::TOO_MANY_PLUGINS"
	// CodeTenantMemory: the tenant's plugins would hold more memory than the host allows.
	CodeTenantMemory = "PLUGIN::TENANT_MEMORY"
	// CodeInitFailed: instantiating or configuring the module failed.
	CodeInitFailed = "PLUGIN::INIT_FAILED"
	// CodeHookConflict: a tenant may have only one decide_ttl plugin.
	CodeHookConflict = "PLUGIN::HOOK_CONFLICT"
	// CodeNotFound: no such plugin, or no plugin of the tenant has the hook.
	CodeNotFound = "PLUGIN::NOT_FOUND"
	// CodeTimeout: a call ran past its deadline; the instance was discarded.
	CodeTimeout = "PLUGIN::TIMEOUT"
	// CodeMemoryLimit: the instance hit its memory limit; it was discarded.
	CodeMemoryLimit = "PLUGIN::MEMORY_LIMIT"
	// CodeTrap: the instance trapped or exited; it was discarded.
	CodeTrap = "PLUGIN::TRAP"
	// CodeBadOutput: the hook returned something that is not the documented JSON.
	CodeBadOutput = "PLUGIN::BAD_OUTPUT"
	// CodeClosed: the host is closed.
	CodeClosed = "PLUGIN::CLOSED"
)

// Error is a plugin failure with a stable Code and a message that is safe to
// show to the plugin's owner. Err, when set, is the internal cause.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		// Causes from wazero carry multi-line stack traces; the first line
		// is the explanation.
		cause := e.Err.Error()
		if i := strings.IndexByte(cause, '\n'); i >= 0 {
			cause = cause[:i]
		}
		return e.Code + ": " + e.Message + ": " + cause
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) and friends match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Err == nil && t.Code == e.Code
}

// Sentinel errors for errors.Is; they match any *Error with the same code.
var (
	ErrNotFound = &Error{Code: CodeNotFound}
	ErrTimeout  = &Error{Code: CodeTimeout}
	ErrClosed   = &Error{Code: CodeClosed}
)

// ErrorCode returns the stable code of err, or "" when err is not a plugin error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
}
