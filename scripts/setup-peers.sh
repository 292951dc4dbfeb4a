#!/usr/bin/env bash
# Installs the peers bench-train times next to llmc: PyTorch 1.13 (Debian's
# python3-torch, for /usr/bin/python3) and JAX with XLA's CPU backend (from
# PyPI, into a virtual environment of its own at $HOME/.cache/llmc/jax, so
# its NumPy does not replace the one Debian's torch was built against); and
# PyTorch 2.x from PyPI in $HOME/.cache/llmc/torch, the peer of
# bench/contention.sh.
# Not needed to build or test llmc; safe to run again.
set -euo pipefail

venv="$HOME/.cache/llmc/jax"
sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi

if dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  echo "setup-peers: python3-torch is installed"
else
  echo "setup-peers: installing python3-torch python3-venv"
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q python3-torch python3-venv
fi

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import jax" 2>/dev/null; then
  echo "setup-peers: JAX is installed in $venv"
else
  echo "setup-peers: installing JAX (CPU) into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q "jax[cpu]"
fi
torch_venv="$HOME/.cache/llmc/torch"
if [[ -x "$torch_venv/bin/python" ]] && "$torch_venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup-peers: PyTorch 2.x is installed in $torch_venv"
else
  echo "setup-peers: installing PyTorch 2.x (PyPI) into $torch_venv"
  /usr/bin/python3 -m venv "$torch_venv"
  "$torch_venv/bin/python" -m pip install -q torch numpy
fi
echo "setup-peers: torch $("$torch_venv/bin/python" -c 'import torch; print(torch.__version__)') in $torch_venv"
echo "setup-peers: torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), jax $("$venv/bin/python" -c 'import jax; print(jax.__version__)')"
