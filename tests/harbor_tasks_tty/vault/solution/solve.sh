#!/bin/bash
# The oracle opens the vault the way an agent must: in a terminal (its own tmux session),
# reading the challenge off the screen.
set -euo pipefail
export SHELL=/bin/bash
S=/tmp/oracle-tmux.sock
t() { tmux -S "$S" "$@"; }
t -f /dev/null new-session -d -s vault -x 120 -y 30 "bash /app/vault.sh; sleep 2"
screen() { t capture-pane -p -t vault; }
wait_for() {
    for _ in $(seq 100); do
        if screen | grep -q "$1"; then return 0; fi
        sleep 0.1
    done
    echo "solve.sh: the vault never asked '$1'; the screen:" >&2
    screen >&2
    exit 1
}
wait_for "Operator name:"
t send-keys -t vault -l "ada"
t send-keys -t vault Enter
wait_for "Challenge:"
read -r a b < <(screen | sed -n 's/.*what is \([0-9]*\) + \([0-9]*\)?.*/\1 \2/p' | tail -1)
t send-keys -t vault -l "$((a + b))"
t send-keys -t vault Enter
wait_for "Passphrase:"
t send-keys -t vault -l "swordfish"
t send-keys -t vault Enter
wait_for "The vault is open."
t kill-server 2>/dev/null || true
