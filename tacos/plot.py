"""Pictures of schedules and sweeps: link timelines, chunk arrivals, topologies, ratio curves.

People judge a schedule faster from a link timeline than from a transfer list,
and a sweep faster from a curve than from a table. From a schedule JSON:

* ``timeline``: one row per link, one bar per transfer over ``[start, end]``,
  coloured by chunk or by the chunk's source NPU (:meth:`Collective.owner`);
* ``arrivals``: one row per NPU, a tick whenever a chunk (or a contribution
  to one) arrives there;
* ``topology``: the network, link width by bandwidth;
* ``all``: the three as panels of one figure.

From a sweep table (:mod:`tacos.sweep`): collective time / lower bound against
collective size and against NPU count.

All transfers of a panel are one matplotlib collection, not one artist each,
so a 100k-transfer timeline renders in seconds. Figures are built with
:class:`matplotlib.figure.Figure` directly (no pyplot), so nothing needs a
display and no global state is touched. matplotlib is imported lazily: it is
the optional ``plot`` extra, and ``tacos`` itself must import without it.
"""

from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import networkx as nx
import numpy as np

from tacos.errors import TacosError
from tacos.output import write_bytes_atomic
from tacos.schedule import Schedule, load_schedules, merge_tenants
from tacos.sweep import TABLE_NAME, Row, dimensions, read_table
from tacos.topology import Topology
from tacos.verify import require_verified

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection
    from matplotlib.colors import Colormap, Normalize
    from matplotlib.figure import Figure

PlotKind = Literal["all", "timeline", "arrivals", "topology"]
ColorBy = Literal["chunk", "source"]
PLOT_KINDS: tuple[PlotKind, ...] = ("all", "timeline", "arrivals", "topology")
COLOR_BY: tuple[ColorBy, ...] = ("chunk", "source")
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}

_RASTERIZE_ABOVE = 5000
"""Vector output draws bars this many and more as one embedded image, to stay a sane size."""
_MAX_ROW_LABELS = 48
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_LINE_STYLES = ("-", "--", ":", "-.")
_LAYOUT_SPRING_MAX_NODES = 500
"""networkx's spring layout needs scipy from here on; larger file topologies go on a circle."""


# ------------------------------------------------------------------ entry point
def plot_file(
    source: str | Path,
    output: str | Path,
    *,
    kind: PlotKind = "all",
    color_by: ColorBy = "chunk",
) -> None:
    """Draw a schedule JSON or a sweep table (``.csv`` or its directory) into ``output``.

    The format follows the suffix of ``output`` (.png, .svg, .pdf).
    """
    source, output = Path(source), Path(output)
    if output.suffix.lower() not in FORMATS:
        raise TacosError(f"{output}: use a .png, .svg or .pdf output file")
    try:
        import matplotlib  # noqa: F401  (only to fail early, with the fix in the message)
    except ImportError:
        raise TacosError(
            "tacos plot needs matplotlib: pip install 'tacos-toolchain[plot]'"
        ) from None
    if source.is_dir() or source.suffix.lower() == ".csv":
        if kind != "all":
            raise TacosError(f"--kind {kind} draws a schedule JSON; {source} is a sweep table")
        rows = read_table(source)
        if not rows:
            raise TacosError(f"{source}: no results table rows (is {TABLE_NAME} there?)")
        figure = sweep_figure(rows, str(source))
    else:
        schedules = load_schedules(source)  # tenants: their traffic drawn together
        require_verified(schedules, source)
        figure = schedule_figure(merge_tenants(schedules), kind=kind, color_by=color_by)
    save_figure(figure, output)


def save_figure(figure: Figure, output: str | Path) -> None:
    """Write ``figure`` atomically, with metadata fixed so equal figures give equal files."""
    import matplotlib

    output = Path(output)
    fmt = FORMATS[output.suffix.lower()]
    # The date each backend would stamp (PDF calls it CreationDate) is left out.
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt, {"Software": None})
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "tacos"}):
        figure.savefig(buffer, format=fmt, dpi=110, metadata=metadata)
    write_bytes_atomic(output, buffer.getvalue())


# ---------------------------------------------------------------- schedules
def schedule_figure(
    schedule: Schedule, *, kind: PlotKind = "all", color_by: ColorBy = "chunk"
) -> Figure:
    """One figure: the chosen panel, or timeline, arrivals and topology stacked."""
    from matplotlib.figure import Figure

    if kind not in PLOT_KINDS:
        raise TacosError(f"--kind {kind!r}: use one of {', '.join(PLOT_KINDS)}")
    topology = schedule.topology
    heights = {
        "timeline": _rows_height(len(topology.links)),
        "arrivals": _rows_height(topology.num_npus),
        "topology": 6.0,
    }
    kinds = [k for k in heights if kind in ("all", k)]
    figure = Figure(figsize=(12, sum(heights[k] for k in kinds)), layout="constrained")
    axes = figure.subplots(len(kinds), 1, squeeze=False, height_ratios=[heights[k] for k in kinds])
    for ax, panel in zip(axes[:, 0], kinds, strict=True):
        if panel == "timeline":
            draw_timeline(ax, schedule, color_by)
        elif panel == "arrivals":
            draw_arrivals(ax, schedule, color_by)
        else:
            draw_topology(ax, topology)
    figure.suptitle(
        f"{schedule.collective.kind} on {topology.describe()}: "
        f"{schedule.collective_time_us:.6g} us, {len(schedule.transfers)} transfers"
    )
    return figure


def draw_timeline(ax: Axes, schedule: Schedule, color_by: ColorBy = "chunk") -> PolyCollection:
    """One bar per transfer on its link's row, all in a single PolyCollection."""
    from matplotlib.collections import PolyCollection

    columns = _transfer_columns(schedule)
    start, end, row = columns["start"], columns["end"], columns["link"].astype(float)
    low, high = row - 0.4, row + 0.4
    xs = np.stack([start, end, end, start], axis=1)
    ys = np.stack([low, low, high, high], axis=1)
    corners = np.stack([xs, ys], axis=2)  # (transfers, 4 corners, x/y)
    values, label = _colour_values(schedule, columns, color_by)
    cmap, norm = _colour_scale(values)
    # thin white edges keep back-to-back transfers of one colour apart
    bars = PolyCollection(list(corners), array=values, cmap=cmap, norm=norm, edgecolors="white")
    bars.set_linewidth(0.25)
    bars.set_rasterized(len(schedule.transfers) >= _RASTERIZE_ABOVE)
    ax.add_collection(bars)
    links = schedule.topology.links
    _label_rows(ax, [f"{lk.src}→{lk.dst}" for lk in links], "link")
    _time_axis(ax, schedule)
    ax.set_title("link timeline")
    ax.figure.colorbar(bars, ax=ax, label=label, pad=0.01)
    return bars


def draw_arrivals(ax: Axes, schedule: Schedule, color_by: ColorBy = "chunk") -> PathCollection:
    """A tick per chunk arriving at an NPU (transfer end), one row per NPU, one scatter."""
    columns = _transfer_columns(schedule)
    values, label = _colour_values(schedule, columns, color_by)
    at_npu = columns["dst"] < schedule.topology.num_npus
    cmap, norm = _colour_scale(values)
    ticks = ax.scatter(
        columns["end"][at_npu],
        columns["dst"][at_npu],
        c=values[at_npu],
        cmap=cmap,
        norm=norm,
        marker="|",
        s=60,
        linewidths=1.0,
        rasterized=bool(np.count_nonzero(at_npu) >= _RASTERIZE_ABOVE),
    )
    _label_rows(ax, [str(n) for n in schedule.topology.npus], "NPU")
    _time_axis(ax, schedule)
    ax.set_title("chunk arrivals per NPU")
    ax.figure.colorbar(ticks, ax=ax, label=label, pad=0.01)
    return ticks


def draw_topology(ax: Axes, topology: Topology) -> tuple[LineCollection, list[PathCollection]]:
    """Nodes and one line per connected node pair, its width by the pair's bandwidth.

    A pair's bandwidth is the larger direction's total (parallel links add up).
    Returns the line collection and the node scatters (NPUs, then switches if any).
    """
    from matplotlib.collections import LineCollection

    positions, grid = _layout(topology)
    between: dict[tuple[int, int], float] = defaultdict(float)
    for link in topology.links:
        between[link.src, link.dst] += link.bandwidth_GBps
    pairs = sorted({(min(u, v), max(u, v)) for u, v in between})
    bandwidth = np.array([max(between[u, v], between[v, u]) for u, v in pairs])
    fastest = float(bandwidth.max()) if len(pairs) else 1.0
    lines = LineCollection(
        [_segment(positions[u], positions[v], bow=grid) for u, v in pairs],
        linewidths=0.6 + 3.4 * bandwidth / fastest,
        colors="0.45",
        zorder=1,
    )
    ax.add_collection(lines)
    npus = np.arange(topology.num_npus)
    switches = np.arange(topology.num_npus, topology.num_nodes)
    nodes = [ax.scatter(positions[npus, 0], positions[npus, 1], s=120, zorder=2, label="NPU")]
    if len(switches):
        x, y = positions[switches, 0], positions[switches, 1]
        nodes.append(ax.scatter(x, y, s=180, marker="s", zorder=2, label="switch"))
    if topology.num_nodes <= 64:
        for node, (x, y) in enumerate(positions):
            ax.annotate(str(node), (x, y), ha="center", va="center", fontsize=7, color="white")
    ax.autoscale_view()
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_axis_off()
    ax.set_title(f"{topology.describe()}; line width ∝ bandwidth (widest {fastest:g} GB/s)")
    return lines, nodes


# ------------------------------------------------------------------- sweeps
def sweep_figure(rows: Sequence[Row], source: str = "sweep") -> Figure:
    """Collective time / lower bound against collective size and against NPU count.

    Each point of a curve is the mean over every other varied input (seeds,
    bandwidths, ...); rows with an error or without a ratio are left out.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    done = [row for row in rows if row["ratio"] and not row["error"]]
    if not done:
        raise TacosError(f"{source}: no finished point without an error to plot")
    figure = Figure(figsize=(13, 5), layout="constrained")
    by_size, by_npus = figure.subplots(1, 2)
    _ratio_curves(by_size, done, ("topology", "collective"), "collective_bytes")
    by_size.set_xscale("log", base=2)
    by_size.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _bytes_label(value)))
    by_size.set_xlabel("collective size (bytes: chunk size × chunks)")
    _ratio_curves(by_npus, done, ("collective",), "npus")
    by_npus.set_xlabel("NPUs")
    for ax, title in ((by_size, "by collective size"), (by_npus, "by NPU count")):
        ax.axhline(1.0, color="0.6", linestyle=":", linewidth=1)
        ax.set_ylabel("collective time / lower bound")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    figure.suptitle(f"{source}: {len(done)} points ({len(rows) - len(done)} with errors)")
    return figure


def _bytes_label(value: float) -> str:
    """``65536`` -> ``64KiB``: sizes as people write them in sweep files."""
    power = min(int(math.log(max(value, 1.0), 1024)), len(_BYTE_UNITS) - 1)
    return f"{value / 1024**power:g}{_BYTE_UNITS[power]}"


def _ratio_curves(ax: Axes, rows: Sequence[Row], group_by: tuple[str, ...], x: str) -> None:
    """One line per group: the mean ratio at every x value.

    The first grouping column picks the colour and the rest the line style, so
    a dozen topology x collective curves stay apart.
    """
    curves: dict[tuple[str, ...], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        curves[tuple(row[c] for c in group_by)][int(row[x])].append(float(row["ratio"]))
    colours: dict[str, int] = {}
    styles: dict[tuple[str, ...], int] = {}
    for group, points in curves.items():
        colour = colours.setdefault(group[0], len(colours))
        style = styles.setdefault(group[1:], len(styles))
        xs = sorted(points)
        ax.plot(
            xs,
            [statistics.fmean(points[v]) for v in xs],
            marker="o",
            color=f"C{colour % 10}",
            linestyle=_LINE_STYLES[style % len(_LINE_STYLES)],
            label=" ".join(group),
        )


# ------------------------------------------------------------------ helpers
def _transfer_columns(schedule: Schedule) -> dict[str, np.ndarray]:
    transfers = schedule.transfers
    return {
        name: np.fromiter((getattr(t, name) for t in transfers), dtype, len(transfers))
        for name, dtype in (("chunk", int), ("dst", int), ("link", int), ("start", float),
                            ("end", float))
    }  # fmt: skip


def _colour_values(
    schedule: Schedule, columns: dict[str, np.ndarray], color_by: ColorBy
) -> tuple[np.ndarray, str]:
    if color_by == "chunk":
        return columns["chunk"], "chunk"
    if color_by != "source":
        raise TacosError(f"--color-by {color_by!r}: use one of {', '.join(COLOR_BY)}")
    owners = np.array([schedule.collective.owner(c) for c in range(schedule.collective.num_chunks)])
    return owners[columns["chunk"]], "source NPU of the chunk"


def _colour_scale(values: np.ndarray) -> tuple[Colormap, Normalize]:
    """Distinct colours for up to 20 values, a continuous map beyond."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap, Normalize

    top = int(values.max()) if len(values) else 0
    if top < 20:
        palette = colormaps["tab20"].colors  # type: ignore[attr-defined]
        return ListedColormap(palette[: top + 1]), Normalize(-0.5, top + 0.5)
    return colormaps["turbo"], Normalize(0, top)


def _time_axis(ax: Axes, schedule: Schedule) -> None:
    ax.set_xlim(0, max(schedule.collective_time_us, 1e-9) * 1.01)  # room for the last tick
    ax.set_xlabel("time (us)")


def _rows_height(rows: int) -> float:
    return float(min(max(1.5 + 0.16 * rows, 3.0), 20.0))


def _label_rows(ax: Axes, labels: Sequence[str], what: str) -> None:
    step = max(1, -(-len(labels) // _MAX_ROW_LABELS))
    ticks = range(0, len(labels), step)
    ax.set_yticks(list(ticks), [labels[i] for i in ticks], fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_ylabel(what)


def _layout(topology: Topology) -> tuple[np.ndarray, bool]:
    """Node positions, and whether they are a grid (where long links must bow around nodes).

    Meshes, tori and hypercubes (by structure) are laid out by coordinates, even
    dimensions across and odd ones down, blocks a gap apart; switched networks
    as NPUs around their switches; the rest by networkx.
    """
    dims = dimensions(topology)
    if dims and topology.num_switches == 0 and int(np.prod(dims)) == topology.num_npus:
        return _grid_positions(dims, topology.num_npus), True
    graph = nx.Graph()
    graph.add_nodes_from(range(topology.num_nodes))
    graph.add_edges_from((link.src, link.dst) for link in topology.links)
    if topology.num_switches:
        shells = [list(range(topology.num_npus, topology.num_nodes)), list(topology.npus)]
        placed = nx.shell_layout(graph, shells)
    elif topology.num_nodes < _LAYOUT_SPRING_MAX_NODES and not _built_as_a_circle(topology):
        placed = nx.spring_layout(graph, seed=0)
    else:
        placed = nx.circular_layout(graph)
    return np.array([placed[node] for node in range(topology.num_nodes)]), False


def _built_as_a_circle(topology: Topology) -> bool:
    structure = topology.structure
    return structure is not None and structure.kind in ("ring", "fully-connected")


def _grid_positions(dims: Sequence[int], count: int) -> np.ndarray:
    positions = np.zeros((count, 2))
    nodes = np.arange(count)
    stride, scale = 1, [1.0, 1.0]
    for dim, size in enumerate(dims):
        axis = dim % 2
        positions[:, axis] += (nodes // stride) % size * scale[axis]
        scale[axis] *= size + 1  # the next dimension on this axis repeats the block, a gap apart
        stride *= size
    positions[:, 1] *= -1  # row 0 at the top
    return positions


def _segment(a: np.ndarray, b: np.ndarray, *, bow: bool) -> np.ndarray:
    """A straight line, or in a grid an arc for links longer than one step (wrap-arounds)."""
    length = float(np.hypot(*(b - a)))
    if not bow or length <= 1.01:
        return np.array([a, b])
    normal = np.array([a[1] - b[1], b[0] - a[0]]) / length
    t = np.linspace(0.0, 1.0, 12)[:, None]
    return a + (b - a) * t + normal * (0.15 * length) * 4 * t * (1 - t)
