#!/bin/bash
set -euo pipefail
rm -f /etc/nginx/sites-enabled/default
cat > /etc/nginx/sites-available/app <<'CONF'
server {
    listen 8080;
    root /app/site;
    index index.html;
    location = /health {
        default_type text/plain;
        return 200 "ok";
    }
}
CONF
ln -sf /etc/nginx/sites-available/app /etc/nginx/sites-enabled/app
nginx -t
if pgrep -x nginx >/dev/null; then nginx -s reload; else nginx; fi
