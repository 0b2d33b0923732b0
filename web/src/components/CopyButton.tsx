import { useState } from "preact/hooks";

/** CopyButton copies text to the clipboard and says so; it falls back to selecting a field. */
export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [done, setDone] = useState<"" | "ok" | "fail">("");
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setDone("ok");
    } catch {
      // Clipboard access needs a secure context or a permission; a hidden field works everywhere.
      const ta = document.createElement("textarea");
      ta.value = text;
      document.body.appendChild(ta);
      ta.select();
      const ok = document.execCommand("copy");
      ta.remove();
      setDone(ok ? "ok" : "fail");
    }
    setTimeout(() => setDone(""), 2000);
  };
  return (
    <button type="button" class="small" onClick={copy} aria-live="polite">
      {done === "ok" ? "Copied" : done === "fail" ? "Copy failed" : label}
    </button>
  );
}
