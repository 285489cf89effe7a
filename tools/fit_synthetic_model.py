"""Fit the Chow-Liu tree behind overlapdp.samples.synthetic_adult on public UCI Adult (integer-coded).

Run once by the maintainers: `python tools/fit_synthetic_model.py ../shared/data/adult/adult.csv`.
It writes src/overlapdp/data/adult-synthetic-model.json: the tree (each attribute's parent, chosen as a
maximum spanning tree of pairwise mutual information) and, per attribute, the non-zero counts of
(parent value, value) in the public data. Sampling from it gives a synthetic table with Adult's
one-way marginals and strongest pairwise dependencies; it describes the public data set, not a
private one.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

ROOT = "income>50K"


def mutual_information(frame: pd.DataFrame, a: str, b: str) -> float:
    joint = pd.crosstab(frame[a], frame[b]).to_numpy(dtype=float)
    p = joint / joint.sum()
    outer = p.sum(axis=1, keepdims=True) @ p.sum(axis=0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log(p[nz] / outer[nz])).sum())


def main(csv: str) -> None:
    frame = pd.read_csv(csv)
    columns = list(frame.columns)
    graph = nx.Graph()
    for a, b in itertools.combinations(columns, 2):
        graph.add_edge(a, b, weight=mutual_information(frame, a, b))
    tree = nx.maximum_spanning_tree(graph)
    parents: dict[str, str | None] = {ROOT: None}
    for u, v in nx.bfs_edges(tree, ROOT):
        parents[v] = u
    order = list(nx.bfs_tree(tree, ROOT))
    tables: dict[str, list[list[int]]] = {}
    for col in order:
        parent = parents[col]
        keys = [col] if parent is None else [parent, col]
        counts = frame.groupby(keys).size()
        if parent is None:
            tables[col] = [[0, int(v), int(c)] for v, c in counts.items()]
        else:
            tables[col] = [[int(pv), int(v), int(c)] for (pv, v), c in counts.items()]
    out = Path(__file__).resolve().parents[1] / "src/overlapdp/data/adult-synthetic-model.json"
    model = {
        "source": "UCI Adult (CC BY 4.0), integer-coded as in private-pgm",
        "order": order,
        "parents": parents,
        "tables": tables,
    }
    out.write_text(json.dumps(model, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/adult/adult.csv")
