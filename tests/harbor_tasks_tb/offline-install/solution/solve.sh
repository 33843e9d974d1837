#!/bin/bash
set -euo pipefail
dpkg -i /opt/debs/*.deb
