"""A generated corpus for the demo: hobby articles with hidden relevance labels.

Every topic has a head word, which each of its queries contains. For a query of topic
``t`` the relevant documents are that topic's articles: *good* ones (label 2: the head word
in the title, a rich body, popular) and *fair* ones (label 1: the head word in the title,
less popular). Keyword-stuffed pages of other topics repeat ``t``'s words in their body and
score well on BM25 but are not relevant (label 0), nor are general pages that mention
the topic in passing.

So the backend's own BM25 order is decent but not good, and a learner that weighs the
title score, the body score and the popularity field from clicks can do much better. The
labels never enter the index: only the simulated users know them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# topic head word first, then seven more words of the topic
TOPICS: dict[str, list[str]] = {
    "espresso": [
        "espresso", "grinder", "portafilter", "crema", "barista", "tamper", "roast", "arabica",
    ],
    "hiking": ["hiking", "trail", "backpack", "summit", "boots", "ridge", "compass", "campsite"],
    "astronomy": [
        "telescope", "nebula", "galaxy", "eyepiece", "orbit", "comet", "observatory", "planet",
    ],
    "baking": ["sourdough", "flour", "yeast", "oven", "loaf", "crust", "dough", "knead"],
    "cycling": [
        "bicycle", "derailleur", "saddle", "pedal", "cadence", "helmet", "chainring", "peloton",
    ],
    "gardening": [
        "compost", "seedling", "mulch", "pruning", "perennial", "soil", "greenhouse", "trowel",
    ],
    "photography": [
        "camera", "aperture", "shutter", "lens", "tripod", "exposure", "portrait", "zoom",
    ],
    "sailing": ["sailboat", "mast", "rudder", "harbor", "anchor", "keel", "regatta", "spinnaker"],
    "chess": [
        "chess", "gambit", "checkmate", "bishop", "rook", "endgame", "opening", "grandmaster",
    ],
    "woodworking": [
        "chisel", "lumber", "dovetail", "sawdust", "workbench", "joinery", "varnish", "mallet",
    ],
    "beekeeping": ["beehive", "honey", "pollen", "queen", "apiary", "swarm", "nectar", "beeswax"],
    "knitting": ["yarn", "needles", "stitch", "sweater", "wool", "cardigan", "purl", "skein"],
    "aquarium": ["aquarium", "tank", "guppy", "coral", "reef", "algae", "gravel", "heater"],
    "guitar": ["guitar", "fretboard", "chord", "strings", "amplifier", "pickup", "capo", "riff"],
    "skiing": ["ski", "slope", "powder", "bindings", "chairlift", "moguls", "piste", "goggles"],
    "pottery": ["pottery", "kiln", "glaze", "clay", "ceramic", "stoneware", "porcelain", "vase"],
    "running": [
        "marathon", "sneakers", "pace", "stride", "sprint", "jogging", "treadmill", "hydration",
    ],
    "tea": ["tea", "oolong", "matcha", "teapot", "steeping", "leaves", "kettle", "infusion"],
    "camping": ["tent", "sleeping", "lantern", "stove", "firewood", "hammock", "tarp", "cooler"],
    "robotics": [
        "robot", "servo", "sensor", "actuator", "microcontroller", "gripper", "lidar", "firmware",
    ],
}

TITLE_WORDS = ["guide", "review", "beginner", "tips", "complete", "buying", "advanced", "everyday",
               "budget", "premium", "classic", "modern", "handbook", "practical", "essential",
               "notes", "journal", "basics", "secrets", "weekend"]
FILLER = ["the", "and", "with", "for", "this", "you", "your", "how", "what", "when", "about",
          "after", "before", "every", "first", "simple", "great", "good", "time", "more", "most",
          "people", "really", "often", "still", "just", "many", "some", "make", "made", "find",
          "best", "work", "well", "need", "also", "here", "there", "year", "season", "price",
          "quality", "choice", "option", "detail", "result", "story", "question", "answer"]

# label and number of documents per topic of each kind
KINDS = {"good": (2, 5), "fair": (1, 5), "stuffed": (0, 8), "mention": (0, 5)}


@dataclass
class DemoCorpus:
    """Documents, queries and the hidden labels of the demo."""

    documents: list[dict] = field(default_factory=list)
    queries: list[tuple[str, str]] = field(default_factory=list)  # (text, topic)
    relevance: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> doc id -> label

    def label(self, topic: str, doc_id: str) -> int:
        return self.relevance[topic].get(doc_id, 0)

    def labels(self, topic: str) -> np.ndarray:
        """Every positive label of the topic (the ideal ranking's material)."""
        return np.array(sorted(self.relevance[topic].values(), reverse=True))


def generate_corpus(seed: int = 7) -> DemoCorpus:
    """A reproducible corpus: good, fair, stuffed and mention documents per topic (as many as
    :data:`KINDS` says), and four two-word queries per topic."""
    rng = np.random.default_rng(seed)
    corpus = DemoCorpus()
    topics = list(TOPICS)

    def words(pool: list[str], k: int) -> list[str]:
        return list(rng.choice(pool, size=k))

    def body(topic_words: list[str], length: int, topical_share: float) -> str:
        n_topical = int(round(length * topical_share)) if topic_words else 0
        tokens = words(topic_words, n_topical) + words(FILLER, length - n_topical)
        rng.shuffle(tokens)
        return " ".join(tokens)

    for topic in topics:
        corpus.relevance[topic] = {}
    serial = 0
    for topic in topics:
        head, *rest = TOPICS[topic]
        for kind, (label, count) in KINDS.items():
            for _ in range(count):
                serial += 1
                doc_id = f"d{serial:04d}"
                if kind == "good":
                    title = f"{rng.choice(TITLE_WORDS)} {head} {' '.join(words(rest, 2))} guide"
                    text = body(TOPICS[topic], int(rng.integers(80, 120)), 0.2)
                    popularity = float(rng.uniform(60, 100))
                elif kind == "fair":
                    title = f"{head} {rng.choice(TITLE_WORDS)}"
                    text = body(TOPICS[topic], int(rng.integers(20, 40)), 0.2)
                    popularity = float(rng.uniform(5, 50))
                elif kind == "stuffed":
                    # A page about nothing much whose body is stuffed with the topic's words.
                    title = " ".join(words(TITLE_WORDS, 3))
                    stuffing = [head] * 8 + rest * 2
                    text = body([], int(rng.integers(8, 15)), 0.0) + " " + " ".join(stuffing)
                    popularity = float(rng.uniform(0, 40))
                else:  # a passing mention in a general page
                    title = " ".join(words(TITLE_WORDS, 3))
                    text = body([], int(rng.integers(30, 60)), 0.0) + f" {head} {rng.choice(rest)}"
                    popularity = float(rng.uniform(0, 100))
                corpus.documents.append({"id": doc_id, "title": title, "body": text,
                                         "popularity": round(popularity, 1)})
                if label:
                    corpus.relevance[topic][doc_id] = label
        for extra in rng.choice(rest, size=4, replace=False):
            corpus.queries.append((f"{head} {extra}", topic))
    order = rng.permutation(len(corpus.documents))
    corpus.documents = [corpus.documents[i] for i in order]
    return corpus
