#!/bin/bash
# The configuration must be valid and nginx, started by the agent (a service left running must
# still run when the tests do, as in Harbor's containers), must serve the site on 8080, /health,
# and nothing on 80.
ok=1
nginx -t || { echo "nginx -t fails"; ok=0; }
pgrep -x nginx >/dev/null || { echo "nginx is not running: the agent must start it"; ok=0; }
sleep 0.5
curl -fsS --max-time 5 http://127.0.0.1:8080/ | grep -q "hello from the nenyax site" \
    || { echo "/ on 8080 does not serve /app/site/index.html"; ok=0; }
[ "$(curl -fsS --max-time 5 http://127.0.0.1:8080/health)" = ok ] \
    || { echo "/health does not answer ok"; ok=0; }
if curl -fsS --max-time 5 http://127.0.0.1:80/ >/dev/null 2>&1; then
  echo "port 80 still serves"; ok=0
fi
echo "$ok" > /logs/verifier/reward.txt
