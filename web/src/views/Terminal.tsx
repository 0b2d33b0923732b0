// The terminal tab: xterm.js over the agent's PTY WebSocket (sandbox-agent/README.md,
// "PTY frames"). This module and xterm.js load only when the tab opens.
import { Terminal as XTerm } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { agent, ApiError } from "../api";
import { ErrorBox } from "../components/Status";

const FRAME_STDIN = 0x00;
const FRAME_STDOUT = 0x01;
const FRAME_STDERR = 0x02;
const FRAME_REPLAY = 0x03;
const CLOSE_DISPLACED = 4001; // another client took the terminal over

type Phase = "starting" | "connected" | "reconnecting" | "displaced" | "exited" | "failed";

export default function Terminal({ id }: { id: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [phase, setPhase] = useState<Phase>("starting");
  const [error, setError] = useState<unknown>();
  const [detail, setDetail] = useState("");
  const [generation, setGeneration] = useState(0); // bump to reconnect by hand

  useEffect(() => {
    const term = new XTerm({ cursorBlink: true, fontSize: 14, fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace", scrollback: 5000, convertEol: false });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current!);
    fit.fit();
    term.focus();
    const client = agent(id);
    const storeKey = `sandgate.pty.${id}`;
    const encoder = new TextEncoder();
    let ws: WebSocket | null = null;
    let sessionId = sessionStorage.getItem(storeKey) || "";
    let offset = 0; // bytes of output seen, to resume without repeats
    let closed = false;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let attempts = 0;

    const sendResize = () => {
      if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
    };

    const connect = async () => {
      try {
        if (!sessionId) {
          const s = await client.createPty(term.cols, term.rows);
          sessionId = s.session_id;
          sessionStorage.setItem(storeKey, sessionId);
          offset = 0;
          term.reset();
        }
      } catch (e) {
        setError(e);
        setPhase("failed");
        return;
      }
      if (closed) return;
      const sock = new WebSocket(client.ptySocketURL(sessionId, offset || undefined));
      sock.binaryType = "arraybuffer";
      ws = sock;
      sock.onopen = () => {
        attempts = 0;
        setPhase("connected");
        setError(undefined);
        sendResize();
      };
      sock.onmessage = (ev) => {
        if (typeof ev.data === "string") {
          try {
            const msg = JSON.parse(ev.data);
            if (msg.type === "exit") {
              setDetail(`The shell exited with status ${msg.exit_code ?? "?"}.`);
              sessionStorage.removeItem(storeKey);
              sessionId = "";
              setPhase("exited");
            }
          } catch {
            /* not ours */
          }
          return;
        }
        const buf = new Uint8Array(ev.data as ArrayBuffer);
        if (buf.length === 0) return;
        if (buf[0] === FRAME_STDOUT || buf[0] === FRAME_STDERR) {
          term.write(buf.subarray(1));
          offset += buf.length - 1;
        } else if (buf[0] === FRAME_REPLAY && buf.length >= 9) {
          const start = Number(new DataView(buf.buffer, buf.byteOffset + 1, 8).getBigUint64(0));
          const data = buf.subarray(9);
          // Replay may start before what we have already drawn: skip the overlap.
          const skip = Math.max(0, offset - start);
          if (skip < data.length) term.write(data.subarray(skip));
          offset = Math.max(offset, start + data.length);
        }
      };
      sock.onclose = async (ev) => {
        if (closed || ws !== sock) return;
        if (ev.code === CLOSE_DISPLACED) {
          setPhase("displaced");
          return;
        }
        if (!sessionId) return; // exited
        // Is the session still there? If not, the next attempt starts a new shell.
        try {
          await client.ptyInfo(sessionId);
        } catch (e) {
          if (e instanceof ApiError && e.status === 404) {
            sessionStorage.removeItem(storeKey);
            sessionId = "";
          }
        }
        attempts++;
        const wait = Math.min(10_000, 500 * 2 ** Math.min(attempts, 5));
        setDetail(`Connection lost (code ${ev.code}); reconnecting in ${Math.round(wait / 1000)} s.`);
        setPhase("reconnecting");
        retry = setTimeout(connect, wait);
      };
    };

    const input = term.onData((d) => {
      if (ws?.readyState !== WebSocket.OPEN) return;
      const bytes = encoder.encode(d);
      const frame = new Uint8Array(bytes.length + 1);
      frame[0] = FRAME_STDIN;
      frame.set(bytes, 1);
      ws.send(frame);
    });
    const resized = term.onResize(sendResize);
    const ro = new ResizeObserver(() => {
      try {
        fit.fit();
      } catch {
        /* hidden */
      }
    });
    ro.observe(host.current!);
    connect();
    return () => {
      closed = true;
      clearTimeout(retry);
      ro.disconnect();
      input.dispose();
      resized.dispose();
      ws?.close();
      term.dispose();
    };
  }, [id, generation]);

  const words: Record<Phase, string> = {
    starting: "Starting a shell…",
    connected: "Connected",
    reconnecting: "Reconnecting…",
    displaced: "This terminal was opened in another window.",
    exited: "The shell ended.",
    failed: "The terminal could not start.",
  };
  return (
    <div class="terminal-view">
      <div class="title-row">
        <span class={`live live-${phase === "connected" ? "live" : phase}`} role="status" data-testid="terminal-status">
          {words[phase]}
        </span>
        {detail && phase !== "connected" && <span class="hint">{detail}</span>}
        {(phase === "displaced" || phase === "reconnecting" || phase === "failed") && (
          <button type="button" class="small" onClick={() => setGeneration((g) => g + 1)}>
            Reconnect now
          </button>
        )}
        <button type="button" class="small" onClick={() => {
            sessionStorage.removeItem(`sandgate.pty.${id}`);
            setGeneration((g) => g + 1);
          }}>
          New shell
        </button>
      </div>
      <ErrorBox error={error} />
      <div class="terminal" ref={host} data-testid="terminal" aria-label="Terminal" />
    </div>
  );
}
