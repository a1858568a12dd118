#!/bin/bash
cat > greet.sh <<'SH'
#!/bin/bash
# Greets someone: greet.sh [--shout] NAME
if [ "$1" = "--shout" ]; then
  echo "Hello, $2!" | tr '[:lower:]' '[:upper:]'
else
  echo "Hello, $1!"
fi
SH
