// The file browser: list a directory, upload (drag and drop or a file picker), download,
// delete, and edit small text files — all through the agent's file API.
import { useRef, useState } from "preact/hooks";
import { agent, type FileInfo } from "../api";
import { useCan } from "../auth";
import { ConfirmButton } from "../components/ConfirmButton";
import { Field } from "../components/Field";
import { Empty, ErrorBox, Loading, Notice } from "../components/Status";
import { bytes, localTime } from "../format";
import { useAction, useAsync } from "../hooks";

const EDIT_LIMIT = 256 * 1024; // larger files are downloaded, not edited in the page

function join(dir: string, name: string) {
  return (dir.endsWith("/") ? dir : dir + "/") + name;
}

function parent(path: string) {
  const p = path.replace(/\/+$/, "");
  const i = p.lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}

function baseName(path: string) {
  return path.replace(/\/+$/, "").split("/").pop() || path;
}

export function FileBrowser({ id }: { id: string }) {
  const can = useCan();
  const client = agent(id);
  const [dir, setDir] = useState("/tmp");
  const [pathText, setPathText] = useState("/tmp");
  const [editing, setEditing] = useState<FileInfo | null>(null);
  const [notice, setNotice] = useState("");
  const [dragging, setDragging] = useState(false);
  const picker = useRef<HTMLInputElement>(null);
  const writable = can("sandbox.proxy");

  const list = useAsync(async () => {
    const answer = await client.list(dir);
    const items = Array.isArray(answer) ? answer : Object.values(answer || {});
    return items.sort((a, b) => (a.type === "directory" ? 0 : 1) - (b.type === "directory" ? 0 : 1) || a.path.localeCompare(b.path));
  }, [id, dir]);

  const go = (p: string) => {
    setEditing(null);
    setDir(p);
    setPathText(p);
  };

  const upload = useAction(async (files: File[]) => {
    if (!files.length) return;
    await client.upload(files.map((f) => ({ path: join(dir, f.name), data: f })));
    setNotice(`Uploaded ${files.map((f) => f.name).join(", ")} to ${dir}.`);
    list.reload();
  });
  const remove = useAction(async (f: FileInfo) => {
    await (f.type === "directory" ? client.removeDir(f.path) : client.removeFile(f.path));
    setNotice(`Deleted ${f.path}.`);
    list.reload();
  });
  const mkdir = useAction(async (name: string) => {
    if (!name.trim() || name.includes("/")) throw new Error("A folder name is one path segment, without slashes.");
    await client.mkdir(join(dir, name.trim()));
    list.reload();
  });
  const [newDir, setNewDir] = useState("");

  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragging(false);
    const files = [...(e.dataTransfer?.files || [])];
    if (files.length) upload.run(files);
  };

  return (
    <div class="card files">
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          go(pathText.trim() || "/");
        }}
      >
        <Field label="Directory" id="dir-path">
          <input id="dir-path" class="mono" value={pathText} onInput={(e) => setPathText(e.currentTarget.value)} />
        </Field>
        <button type="submit">Open</button>
        <button type="button" onClick={() => go(parent(dir))} disabled={dir === "/"}>
          Up
        </button>
        <button type="button" onClick={list.reload}>
          Refresh
        </button>
      </form>
      {writable && (
        <div
          class={`dropzone ${dragging ? "over" : ""}`}
          data-testid="dropzone"
          onDragOver={(e) => {
            e.preventDefault();
            setDragging(true);
          }}
          onDragLeave={() => setDragging(false)}
          onDrop={onDrop}
        >
          <p>
            Drop files here to upload them to <code>{dir}</code>, or{" "}
            <button type="button" class="linkish" onClick={() => picker.current?.click()}>
              choose files
            </button>
            .
          </p>
          <label class="sr-only" for="upload-input">
            Files to upload
          </label>
          <input
            id="upload-input"
            ref={picker}
            type="file"
            multiple
            class="sr-only"
            tabIndex={-1}
            data-testid="upload-input"
            onChange={(e) => {
              const files = [...(e.currentTarget.files || [])];
              e.currentTarget.value = "";
              upload.run(files);
            }}
          />
          {upload.busy && <Loading what="the upload" />}
          <form
            class="inline-form"
            onSubmit={(e) => {
              e.preventDefault();
              mkdir.run(newDir).then(() => setNewDir(""));
            }}
          >
            <Field label="New folder" id="new-dir">
              <input id="new-dir" value={newDir} onInput={(e) => setNewDir(e.currentTarget.value)} />
            </Field>
            <button type="submit">Create folder</button>
          </form>
        </div>
      )}
      <ErrorBox error={upload.error || remove.error || mkdir.error} />
      {notice && <Notice>{notice}</Notice>}
      {editing && <Editor id={id} file={editing} onDone={(saved) => { setEditing(null); if (saved) { setNotice(`Saved ${saved}.`); list.reload(); } }} />}
      {list.loading && !list.data ? (
        <Loading what={`the files in ${dir}`} />
      ) : list.error ? (
        <ErrorBox error={list.error} onRetry={list.reload} />
      ) : list.data && list.data.length === 0 ? (
        <Empty>
          <p>
            <code>{dir}</code> is empty.
          </p>
        </Empty>
      ) : (
        <div class="table-wrap">
          <table class="list" data-testid="file-table">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Size</th>
                <th scope="col" class="wide">Modified</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {(list.data || []).map((f) => (
                <tr key={f.path} data-path={f.path}>
                  <td class="mono">
                    {f.type === "directory" ? (
                      <button type="button" class="linkish" onClick={() => go(f.path)}>
                        {baseName(f.path)}/
                      </button>
                    ) : (
                      baseName(f.path)
                    )}
                  </td>
                  <td>{f.type === "directory" ? "—" : bytes(f.size)}</td>
                  <td class="wide">{localTime(f.modified_at)}</td>
                  <td class="row-actions">
                    {f.type === "file" && (
                      <a class="button small" href={client.downloadURL(f.path)} download={baseName(f.path)} data-testid="download">
                        Download
                      </a>
                    )}
                    {f.type === "file" && writable && f.size <= EDIT_LIMIT && (
                      <button type="button" class="small" onClick={() => setEditing(f)} data-testid="edit">
                        Edit
                      </button>
                    )}
                    {writable && (
                      <ConfirmButton class="small" onConfirm={() => remove.run(f)} testid="delete-file">
                        Delete
                      </ConfirmButton>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function Editor({ id, file, onDone }: { id: string; file: FileInfo; onDone: (saved?: string) => void }) {
  const client = agent(id);
  const content = useAsync(async () => {
    const res = await client.download(file.path);
    const buf = new Uint8Array(await res.arrayBuffer());
    if (buf.includes(0)) throw new Error("This file looks binary; download it instead.");
    return new TextDecoder().decode(buf);
  }, [file.path]);
  const [text, setText] = useState<string | null>(null);
  const save = useAction(async () => {
    await client.upload([{ path: file.path, data: new Blob([text ?? content.data ?? ""]) }]);
    onDone(file.path);
  });
  return (
    <form
      class="card editor"
      onSubmit={(e) => {
        e.preventDefault();
        save.run();
      }}
    >
      <h3 class="mono">{file.path}</h3>
      {content.loading ? (
        <Loading what="the file" />
      ) : content.error ? (
        <ErrorBox error={content.error} />
      ) : (
        <Field label="Content" id="file-content">
          <textarea id="file-content" class="mono" rows={16} spellcheck={false} value={text ?? content.data} onInput={(e) => setText(e.currentTarget.value)} />
        </Field>
      )}
      <ErrorBox error={save.error} />
      <div class="actions">
        <button type="submit" class="primary" disabled={save.busy || !!content.error || content.loading} data-testid="save-file">
          {save.busy ? "Saving…" : "Save"}
        </button>
        <button type="button" onClick={() => onDone()}>
          Close
        </button>
      </div>
    </form>
  );
}
