#!/usr/bin/env sh
# Delage's Table 2, in spirit: a library that grows as MQ2008's training queries (and their
# documents) appear in file order, users who each come for one preferred document (drawn by
# gain, clicked wherever it is ranked), 22,000 impressions, 10 runs, under the paper's protocol
# (every learner starts from w = 0 and sees the data's features only; Delage's user finds the
# item wherever it is ranked, so the argmax KLRank learners compare a click with every
# candidate, choice_set=all, as in the paper).
#   sh examples/mq2008_growing_library.sh ../shared/data/letor4-mq2008 [OUT]
# (the project's virtual environment's reranker when there is one, else the one on PATH;
# the results go to OUT, mq2008-growing by default)
set -eu
D=${1:?usage: mq2008_growing_library.sh MQ2008_FOLDER [OUT]}
OUT=${2:-mq2008-growing}
RERANKER="$(dirname "$0")/../.venv/bin/reranker"
[ -x "$RERANKER" ] || RERANKER=reranker
"$RERANKER" simulate --train "$D/S1.txt.gz" "$D/S2.txt.gz" "$D/S3.txt.gz" --test "$D/S5.txt.gz" \
  --learner noregret_klrank greedy_klrank online_ranknet preference_perceptron \
            batch_preference_perceptron exponentiated_preference_perceptron \
            convex_preference_perceptron second_order_preference_perceptron \
  --click-model choice --library growing --impressions 22000 --runs 10 --seed 1 \
  --start zero --no-click-features \
  --param greedy_klrank.choice_set=all --param online_ranknet.choice_set=all --out "$OUT"
