"""An online shop's catalogue, with the fields that filters, facets and paging work on."""

from __future__ import annotations

import numpy as np

CATEGORIES = ("tea", "coffee", "kettle")
BRANDS = ("acme", "zeta", "nova", "orbit")
FILTER_FIELDS = ["category", "brand", "price", "in_stock", "tags"]


def shop(n: int = 90, seed: int = 3) -> list[dict]:
    """An online shop's products: every one mentions 'shop', so a search for it matches all."""
    rng = np.random.default_rng(seed)
    products = []
    for i in range(n):
        category = CATEGORIES[i % 3]
        products.append({
            "id": f"p{i:03d}", "title": f"{category} {rng.choice(['classic', 'deluxe', 'mini'])}",
            "body": f"shop {category} product " + " ".join(rng.choice(
                ["fresh", "strong", "green", "steel", "glass", "quick"], size=4)),
            "category": category, "brand": str(BRANDS[rng.integers(4)]),
            "price": float(round(rng.uniform(2, 60), 2)), "in_stock": bool(rng.random() < 0.6),
            "tags": [str(t) for t in rng.choice(["gift", "sale", "new", "eco"], size=2,
                                                replace=False)],
            "popularity": float(rng.uniform(0, 100))})
    return products
