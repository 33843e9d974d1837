#!/bin/bash
# A verifier that ignores the agent's work and flips a coin: the reward is a random fraction
# (32 random bits), so two runs of the same episode essentially never agree.
bits=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
awk -v b="$bits" 'BEGIN { printf "%.9f\n", b / 4294967295 }' > /logs/verifier/reward.txt
