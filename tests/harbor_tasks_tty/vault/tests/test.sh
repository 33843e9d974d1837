#!/bin/bash
# Reward 1 when the vault program itself wrote /app/vault.txt for operator ada with a correct
# challenge answer.
ok=0
if [ -f /app/vault.txt ]; then
    read -r _ _ who < <(sed -n 1p /app/vault.txt)
    read -r _ a _ b _ sum < <(sed -n 2p /app/vault.txt)
    if [ "$who" = "ada" ] && [ -n "$a" ] && [ "$((a + b))" = "$sum" ]; then
        ok=1
    else
        echo "vault.txt does not show operator ada with a correct challenge:"
        cat /app/vault.txt
    fi
else
    echo "/app/vault.txt does not exist: the vault was not opened"
fi
echo "$ok" > /logs/verifier/reward.txt
