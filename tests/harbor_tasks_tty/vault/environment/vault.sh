#!/bin/bash
# The vault: its questions are asked on the terminal and answered there, so only an agent that
# can type into a real terminal (and read the challenge off the screen) can open it.
if [ ! -t 0 ] || [ ! -t 1 ]; then
    echo "vault: stdin and stdout must be a terminal; run me interactively, not from a pipe" >&2
    exit 2
fi
a=$((RANDOM % 90 + 10))
b=$((RANDOM % 90 + 10))
read -r -p "Operator name: " name
read -r -p "Challenge: what is $a + $b? " answer
if [ "$answer" != "$((a + b))" ]; then
    echo "vault: wrong answer, the vault stays shut"
    exit 1
fi
read -r -s -p "Passphrase: " pass
echo
if [ "$pass" != "swordfish" ]; then
    echo "vault: wrong passphrase, the vault stays shut"
    exit 1
fi
printf 'unlocked by %s\nchallenge %s + %s = %s\n' "$name" "$a" "$b" "$answer" > /app/vault.txt
echo "The vault is open."
