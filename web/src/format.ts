// Small formatting helpers shared by the views.

export function relativeTime(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "—";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((t - now) / 1000);
  const abs = Math.abs(s);
  const unit = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : abs < 86400 ? `${Math.round(abs / 3600)}h` : `${Math.round(abs / 86400)}d`;
  return s >= 0 ? `in ${unit}` : `${unit} ago`;
}

export function localTime(iso: string | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function bytes(n: number | undefined): string {
  if (n === undefined) return "—";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function shortId(id: string): string {
  return id.length > 13 ? id.slice(0, 8) : id;
}

/** parsePairs reads "key=value" lines (or comma-separated pairs) into a map. */
export function parsePairs(text: string): { pairs: Record<string, string>; bad: string[] } {
  const pairs: Record<string, string> = {};
  const bad: string[] = [];
  for (const raw of text.split(/[\n,]/)) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf("=");
    if (i <= 0) {
      bad.push(line);
      continue;
    }
    pairs[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return { pairs, bad };
}

export function formatPairs(m: Record<string, string> | undefined): string {
  return Object.entries(m || {})
    .map(([k, v]) => `${k}=${v}`)
    .join("\n");
}

/** splitCommand splits a command line into argv, honouring simple quotes. */
export function splitCommand(s: string): string[] {
  const out: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}
