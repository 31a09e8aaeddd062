"""The dialogue combiner's weights (memory.search.kinds). Written by bench/retrieval/kind_weights.py; do not edit.

Learned on the LoCoMo dev split (conversations 26, 30 and 41; the data is not in this repository): 2188 passed
dialogue chunks of the default search with the hand-picked blend, 439 of them holding a gold line; logistic
regression, L2 1.0 on standardised features fused, text, cosine, line, dated, rank, gap.
"""

from hermit.memory.search.kinds import Combiner

DIALOGUE_COMBINER = Combiner(
    mean=(
        0.5650870364540876,
        0.6677854729512449,
        0.39040119268465157,
        0.4293846202896043,
        0.018738574040219377,
        0.4853112939264677,
        0.2351377568917666,
    ),
    sd=(
        0.17297900493324456,
        0.24906115620152658,
        0.14417372912760051,
        0.1604078092015699,
        0.1356002945540997,
        0.3465107697810861,
        0.18393857125856108,
    ),
    weights=(
        0.10217309480130464,
        0.46519377017126423,
        -0.38411779949879277,
        0.7478955907499142,
        0.20937518831012125,
        -0.46973004531236867,
        -0.5756758370805128,
    ),
    bias=-2.079526418574587,
)
