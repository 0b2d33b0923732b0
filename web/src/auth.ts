// Who is signed in and what their role allows. The console hides what the key may not do;
// the gateway still decides every request.
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { Role, WhoAmI } from "./api";

export interface Auth {
  tenant: string;
  role: Role;
  keyId: string;
  can?: Record<string, boolean>;
}

export const AuthContext = createContext<{ auth: Auth; signOut: () => void } | null>(null);

export function useAuth() {
  const v = useContext(AuthContext);
  if (!v) throw new Error("useAuth outside a signed-in console");
  return v;
}

/** fromWhoAmI merges the session answer with whoami's permission map. */
export function fromWhoAmI(base: Auth, who?: WhoAmI): Auth {
  if (!who) return base;
  return { tenant: who.tenant || base.tenant, role: who.role || base.role, keyId: who.keyId || base.keyId, can: who.can || base.can };
}

// What each role may do when the gateway does not say (policy/rego/access.rego's defaults).
const READ_VERBS = new Set(["get", "list", "read"]);

export function allowed(auth: Auth, action: string): boolean {
  if (auth.can && action in auth.can) return !!auth.can[action];
  const [area, verb] = action.split(".");
  const platformOnly = (area === "tenant" && verb !== "get") || action === "policy.write";
  switch (auth.role) {
    case "admin":
      return true;
    case "tenant-admin":
      return !platformOnly;
    case "member":
      if (["sandbox", "pool", "batch", "snapshot"].includes(area)) return true;
      return READ_VERBS.has(verb) && area !== "key" && !platformOnly;
    default:
      return READ_VERBS.has(verb) && area !== "key" && !platformOnly;
  }
}

export function useCan(): (action: string) => boolean {
  const { auth } = useAuth();
  return (action: string) => allowed(auth, action);
}
