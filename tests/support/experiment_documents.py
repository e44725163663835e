"""Status documents of experiments, as `GET /experiments` answers them, and the rows of the
terminal table that reports them, for the report and dashboard tests."""

from __future__ import annotations


def canned_status() -> dict:
    """A realistic status document: three arms, two pairs, some values not known yet."""
    return {
        "experiment": "guarded-rollout",
        "mode": "interleave",
        "status": "running",
        "alpha": 0.05,
        "test": "mixture sequential probability ratio test (always valid)",
        "impressions": 1234,
        "updated": 1790000000.0,
        "promoted": None,
        "arms": {
            "perceptron": {
                "id": "preference_perceptron-1a2b3c4d", "learner": "preference_perceptron",
                "params": {}, "model_version": 12, "impressions": 1234, "clicks": 800,
                "credited_clicks": 450, "status": "serving",
                "learning": {"impressions": 1234, "updates": 610, "clicks": 800},
                "metrics": {"clicks_per_search": {"value": 0.8, "interval": [0.75, 0.85]},
                            "abandonment": {"value": 0.3, "interval": [0.28, 0.32]},
                            "mrr": {"value": 0.41, "interval": [0.39, 0.43]},
                            "clicks_at_3": {"value": 0.5, "interval": [0.47, 0.53]}},
                "curve": [{"impressions": 100, "value": 0.52},
                          {"impressions": 200, "value": 0.58},
                          {"impressions": 400, "value": 0.61},
                          {"impressions": 800, "value": 0.6}],
            },
            "engine": {
                "id": "backend_order-9f8e7d6c", "learner": "backend_order", "params": {},
                "model_version": 0, "impressions": 1234, "clicks": 700,
                "credited_clicks": 350, "status": "serving",
                "metrics": {"clicks_per_search": {"value": 0.7, "interval": [0.65, 0.75]},
                            "abandonment": {"value": 0.35, "interval": None},
                            "mrr": {"value": 0.36, "interval": [0.34, 0.38]},
                            "clicks_at_3": {"value": 0.4375, "interval": [0.41, 0.46]}},
                "curve": [{"impressions": 100, "value": 0.48},
                          {"impressions": 200, "value": None},
                          {"impressions": 400, "value": 0.42},
                          {"impressions": 800, "value": 0.4}],
            },
            "coactive": {
                "id": "coactive-5e6f7a8b", "learner": "coactive", "params": {"rate": 0.1},
                "model_version": 3, "impressions": 25, "clicks": 14, "credited_clicks": 9,
                "status": "held", "learning": {"impressions": 25, "updates": 0, "clicks": 14},
                "metrics": {"clicks_per_search": {"value": 0.56, "interval": None},
                            "abandonment": None, "mrr": None, "clicks_at_3": None},
                "curve": [],
            },
        },
        "notes": [
            {"arm": "coactive", "kind": "warning",
             "text": "not learning: arm 'coactive' (coactive) took part in 21 pages with a "
                     "click and its model learned from none of them (applied 25)"},
            {"arm": "perceptron", "kind": "warning",
             "text": "perceptron started at version 9, after learning from 900 impressions "
                     "before the experiment"},
        ],
        "traffic": {"searches": 3521, "in_experiment": 1234, "outside": 2287,
                    "share": 0.35046861687020734, "configured_share": 0.35},
        "history": [
            {"at": 1789990000.0, "action": "held back", "arm": "perceptron",
             "because": "600 closed pages of the 1000 experiment.min_impressions asks; it "
                        "beat engine (win rate 0.600, always-valid p 0.004, after 600 closed "
                        "pages)", "impressions": 600},
            {"at": 1789995000.0, "action": "held", "arm": "coactive",
             "because": "lost to engine", "impressions": 1100},
        ],
        "pairs": [
            {"arms": ["perceptron", "engine"], "wins": 300, "losses": 200, "ties": 150,
             "win_rate": 0.6, "interval": [0.56, 0.64], "p_value": 0.00001,
             "always_valid_p": 0.0004, "significant": True, "winner": "perceptron"},
            {"arms": ["coactive", "engine"], "wins": 12, "losses": 9, "ties": 4,
             "win_rate": 0.5714285714285714, "interval": [0.3125, 0.7890625],
             "p_value": 0.6636, "always_valid_p": None, "significant": False,
             "winner": None},
        ],
    }


def table_row(text: str, first_cell: str) -> list[str]:
    """The cells of the terminal table row whose first cell is ``first_cell``, with the
    lines the row continues on (a measure's interval) joined by a space."""
    row: list[str] | None = None
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if row is not None:
            if len(cells) != len(row) or cells[0]:
                return row
            row = [" ".join(part for part in pair if part) for pair in zip(row, cells, strict=True)]
        elif cells and cells[0] == first_cell:
            row = cells
    if row is None:
        raise AssertionError(f"no row {first_cell!r} in:\n{text}")
    return row
