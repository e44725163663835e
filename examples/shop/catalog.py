"""A generated catalogue of an online shop, for the walk-through "An online shop, end to
end" (docs/how-to/shop.md).

    python examples/shop/catalog.py products.jsonl            # 1,000 products
    python examples/shop/catalog.py products.jsonl --count 5000 --seed 3

Each product is one JSON line: ``id`` (``sku-00001``), ``title``, ``description``,
``category``, ``brand``, ``price`` (a number), ``in_stock`` (true/false), ``popularity``
(sales in the last month) and ``rating`` (1-5). The same seed gives the same catalogue.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

#: category -> product nouns
CATEGORIES: dict[str, list[str]] = {
    "tea": ["green tea", "black tea", "oolong tea", "herbal tea", "tea kettle", "teapot",
            "tea infuser", "matcha whisk"],
    "coffee": ["coffee grinder", "espresso machine", "coffee beans", "french press",
               "milk frother", "pour-over dripper", "espresso cups", "coffee scale"],
    "kitchen": ["chef knife", "cutting board", "frying pan", "saucepan", "mixing bowls",
                "kitchen scale", "dutch oven", "spatula set"],
    "garden": ["garden hose", "pruning shears", "watering can", "seed tray", "trowel",
               "compost bin", "garden gloves", "plant pots"],
    "outdoor": ["camping tent", "sleeping bag", "hiking backpack", "water bottle",
                "headlamp", "camping stove", "trekking poles", "rain jacket"],
    "office": ["desk lamp", "notebook", "fountain pen", "desk organiser", "monitor stand",
               "office chair", "paper shredder", "stapler"],
}
BRANDS = ["acme", "zeta", "northwind", "lumen", "fielder", "kestrel", "orbit", "tandem"]
ADJECTIVES = ["classic", "compact", "deluxe", "everyday", "premium", "travel", "large",
              "small", "organic", "stainless", "bamboo", "ceramic", "cast iron", "eco"]
PHRASES = ["easy to clean", "gift boxed", "two year warranty", "for daily use",
           "lightweight and durable", "award winning design", "made to last",
           "great for beginners", "loved by professionals", "ships within a day"]


def generate(count: int = 1000, seed: int = 0) -> list[dict]:
    """``count`` products; popular products are fewer than niche ones (a long tail)."""
    rng = random.Random(seed)
    products = []
    for i in range(1, count + 1):
        category = rng.choice(sorted(CATEGORIES))
        noun = rng.choice(CATEGORIES[category])
        brand = rng.choice(BRANDS)
        adjective = rng.choice(ADJECTIVES)
        title = f"{brand.title()} {adjective} {noun}"
        article = "An" if adjective[0] in "aeiou" else "A"
        description = (f"{article} {adjective} {noun} by {brand.title()}: "
                       f"{', '.join(rng.sample(PHRASES, 3))}. "
                       f"{rng.choice(['Perfect with', 'Pairs well with', 'See also'])} our "
                       f"{rng.choice(CATEGORIES[category])}.")
        products.append({
            "id": f"sku-{i:05d}",
            "title": title,
            "description": description,
            "category": category,
            "brand": brand,
            "price": round(rng.lognormvariate(3.0, 0.7), 2),
            "in_stock": rng.random() < 0.8,
            "popularity": int(rng.paretovariate(1.2) * 10),
            "rating": round(min(5.0, max(1.0, rng.gauss(4.0, 0.6))), 1),
        })
    return products


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON lines file to write")
    parser.add_argument("--count", type=int, default=1000, help="number of products")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args()
    with open(args.out, "w", encoding="utf-8") as handle:
        for product in generate(args.count, args.seed):
            handle.write(json.dumps(product) + "\n")
    print(f"wrote {args.count} products to {args.out}")


if __name__ == "__main__":
    main()
