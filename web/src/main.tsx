import { render } from "preact";
import "./styles.css";
import { App } from "./App";

const root = document.getElementById("app")!;
root.textContent = ""; // the "Loading…" line shown until this script runs
render(<App />, root);
