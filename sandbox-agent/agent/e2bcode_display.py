# Display formatters the sandbox agent registers in a Python kernel run through E2B's
# code-interpreter API: beside its picture, a matplotlib figure is described as data
# under "e2b/chart" (line, scatter, bar and pie charts; several axes make a
# "superchart"), and a pandas DataFrame as its columns under "e2b/data". Both are
# looked up by name, so neither library is imported until the code uses it.
def __sandgate_e2b_display():
    import json
    import math
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter

    shell = get_ipython()
    if shell is None or "e2b/chart" in shell.display_formatter.formatters:
        return

    def register(mime, module, name, describe):
        # A formatter of its own rather than a printer registered by type: the inline
        # matplotlib backend drops every formatter's printers for Figure when it starts.
        class Describe(BaseFormatter):
            def __call__(self, obj):
                if not self.enabled:
                    return None
                cls = getattr(sys.modules.get(module), name, None)
                if cls is None or not isinstance(obj, cls):
                    return None
                try:
                    return describe(obj)
                except Exception:
                    # What this cannot describe is shown without the description.
                    return None

        shell.display_formatter.formatters[mime] = Describe(format_type=mime, parent=shell.display_formatter)
        types = list(shell.display_formatter.active_types)
        if mime not in types:
            shell.display_formatter.active_types = types + [mime]

    def value(v):
        # A number when it is one (NaN and infinities become null: the bundle is JSON),
        # else its text.
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        return f if math.isfinite(f) else None

    def ticks(ax, axis):
        getter = ax.get_xticks if axis == "x" else ax.get_yticks
        labels = ax.get_xticklabels if axis == "x" else ax.get_yticklabels
        return [value(t) for t in getter()], [t.get_text() for t in labels()]

    def label_of(artist, fallback):
        label = artist.get_label() or ""
        return fallback if label.startswith("_") else label

    def two_d(ax, kind):
        return {
            "type": kind,
            "title": ax.get_title(),
            "x_label": ax.get_xlabel() or None,
            "y_label": ax.get_ylabel() or None,
            "x_unit": None,
            "y_unit": None,
        }

    def point_chart(ax, kind, series):
        chart = two_d(ax, kind)
        chart["x_ticks"], chart["x_tick_labels"] = ticks(ax, "x")
        chart["y_ticks"], chart["y_tick_labels"] = ticks(ax, "y")
        chart["x_scale"] = ax.get_xscale()
        chart["y_scale"] = ax.get_yscale()
        chart["elements"] = series
        return chart

    def axes_chart(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge

        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            return {
                "type": "pie",
                "title": ax.get_title(),
                "elements": [
                    {"label": label_of(w, "slice %d" % i), "angle": value(w.theta2 - w.theta1), "radius": value(w.r)}
                    for i, w in enumerate(wedges)
                ],
            }
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars:
            positions, names = ticks(ax, "x")
            by_position = dict(zip(positions, names))
            elements = []
            for g, container in enumerate(bars):
                group = label_of(container, "group %d" % g)
                for i, rect in enumerate(container.patches):
                    center = value(rect.get_x() + rect.get_width() / 2)
                    elements.append({
                        "label": by_position.get(center) or str(i),
                        "group": group,
                        "value": value(rect.get_height()),
                    })
            return dict(two_d(ax, "bar"), elements=elements)
        lines = [l for l in ax.get_lines() if l.get_visible()]
        scatters = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
        if scatters and not lines:
            series = [
                {"label": label_of(c, "series %d" % i), "points": [[value(x), value(y)] for x, y in c.get_offsets()]}
                for i, c in enumerate(scatters)
            ]
            return point_chart(ax, "scatter", series)
        if lines:
            series = [
                {"label": label_of(l, "line %d" % i), "points": [[value(x), value(y)] for x, y in zip(l.get_xdata(), l.get_ydata())]}
                for i, l in enumerate(lines)
            ]
            return point_chart(ax, "line", series)
        return None

    def figure_chart(fig):
        charts = [c for c in (axes_chart(ax) for ax in fig.get_axes() if ax.get_visible()) if c]
        if not charts:
            return None
        if len(charts) == 1:
            return charts[0]
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
        return {"type": "superchart", "title": title, "elements": charts}

    def frame_data(df):
        return json.loads(df.to_json(orient="columns", date_format="iso", default_handler=str))

    register("e2b/chart", "matplotlib.figure", "Figure", figure_chart)
    register("e2b/data", "pandas", "DataFrame", frame_data)


__sandgate_e2b_display()
del __sandgate_e2b_display
