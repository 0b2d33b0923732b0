// The console's shell: the session, the navigation and the view for the current route.
import { useEffect, useState } from "preact/hooks";
import { ApiError, session, setCsrfToken, setUnauthorizedHandler, type Session } from "./api";
import { AuthContext, allowed, fromWhoAmI, type Auth } from "./auth";
import { href, useRoute } from "./router";
import { ErrorBox, Loading } from "./components/Status";
import { SignIn } from "./views/SignIn";
import { SandboxList } from "./views/SandboxList";
import { SandboxDetail } from "./views/SandboxDetail";
import { Pools } from "./views/Pools";
import { Fleet } from "./views/Fleet";
import { Batches } from "./views/Batches";
import { Policy } from "./views/Policy";
import { Plugins } from "./views/Plugins";
import { Audit } from "./views/Audit";
import { Tenants } from "./views/Tenants";

type Phase = { kind: "checking" } | { kind: "signed-out"; reason?: string } | { kind: "signed-in"; auth: Auth } | { kind: "failed"; error: unknown };

export function App() {
  const [phase, setPhase] = useState<Phase>({ kind: "checking" });

  const enter = async (s: Session) => {
    setCsrfToken(s.csrfToken);
    const base: Auth = { tenant: s.tenant, role: s.role, keyId: s.keyId, can: s.can };
    // The session answer carries what the role may do; whoami may say it when it does not.
    const who = s.can ? undefined : await session.whoami().catch(() => undefined);
    setPhase({ kind: "signed-in", auth: fromWhoAmI(base, who) });
  };

  const check = () => {
    setPhase({ kind: "checking" });
    session.current().then(enter, (e) => {
      if (e instanceof ApiError && e.status === 401) setPhase({ kind: "signed-out" });
      else setPhase({ kind: "failed", error: e });
    });
  };

  useEffect(() => {
    check();
    setUnauthorizedHandler(() => {
      setCsrfToken("");
      setPhase({ kind: "signed-out", reason: "Your session has ended. Sign in again to continue." });
    });
    return () => setUnauthorizedHandler(null);
  }, []);

  const signOut = async () => {
    await session.signOut().catch(() => undefined);
    setCsrfToken("");
    setPhase({ kind: "signed-out", reason: "You are signed out." });
  };

  switch (phase.kind) {
    case "checking":
      return (
        <main class="center">
          <Loading what="your session" />
        </main>
      );
    case "failed":
      return (
        <main class="center">
          <h1>sandgate console</h1>
          <ErrorBox error={phase.error} onRetry={check} />
        </main>
      );
    case "signed-out":
      return <SignIn reason={phase.reason} onSignedIn={enter} />;
    case "signed-in":
      return (
        <AuthContext.Provider value={{ auth: phase.auth, signOut }}>
          <Shell auth={phase.auth} signOut={signOut} />
        </AuthContext.Provider>
      );
  }
}

const NAV: { path: string; label: string; action: string }[] = [
  { path: "sandboxes", label: "Sandboxes", action: "sandbox.list" },
  { path: "pools", label: "Pools", action: "pool.list" },
  { path: "batches", label: "Batches", action: "batch.get" },
  { path: "policy", label: "Policy", action: "policy.read" },
  { path: "plugins", label: "Plugins", action: "plugin.list" },
  { path: "audit", label: "Audit log", action: "audit.read" },
  { path: "tenants", label: "Tenants & keys", action: "key.list" },
  { path: "fleet", label: "Fleet", action: "metrics.read" },
];

function Shell({ auth, signOut }: { auth: Auth; signOut: () => void }) {
  const route = useRoute();
  const [menuOpen, setMenuOpen] = useState(false);
  const section = route.path[0] || "sandboxes";
  useEffect(() => setMenuOpen(false), [route.path.join("/")]);
  // The fleet's metrics are the platform admin's only (the gateway checks the key).
  const nav = NAV.filter((n) => (n.path === "fleet" ? auth.role === "admin" : allowed(auth, n.action) || (n.path === "tenants" && allowed(auth, "tenant.list"))));
  return (
    <div class="shell">
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={href("sandboxes")}>
          sandgate
        </a>
        <button type="button" class="menu-toggle" aria-expanded={menuOpen} aria-controls="nav" onClick={() => setMenuOpen(!menuOpen)}>
          Menu
        </button>
        <div class="who" data-testid="who">
          <span title={`key ${auth.keyId}`}>
            {auth.tenant || "platform"} · <strong data-testid="role">{auth.role}</strong>
          </span>
          <button type="button" class="small" onClick={signOut} data-testid="sign-out">
            Sign out
          </button>
        </div>
      </header>
      <nav id="nav" class={menuOpen ? "open" : ""} aria-label="Main">
        <ul>
          {nav.map((n) => (
            <li key={n.path}>
              <a href={href(n.path)} aria-current={section === n.path ? "page" : undefined}>
                {n.label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        <View section={section} rest={route.path.slice(1)} query={route.query} />
      </main>
    </div>
  );
}

function View({ section, rest, query }: { section: string; rest: string[]; query: URLSearchParams }) {
  switch (section) {
    case "sandboxes":
      return rest[0] ? <SandboxDetail id={rest[0]} tab={rest[1] || "overview"} /> : <SandboxList key={query.toString()} query={query} />;
    case "pools":
      return <Pools />;
    case "fleet":
      return <Fleet />;
    case "batches":
      return <Batches id={rest[0]} />;
    case "policy":
      return <Policy />;
    case "plugins":
      return <Plugins />;
    case "audit":
      return <Audit key={query.toString()} query={query} />;
    case "tenants":
      return <Tenants />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            There is no page at <code>#{["", section, ...rest].join("/")}</code>. <a href={href("sandboxes")}>Go to the sandboxes</a>.
          </p>
        </section>
      );
  }
}
