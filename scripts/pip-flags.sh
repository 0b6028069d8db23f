# Sourced by the scripts that pip-install: sets pip_flags for the `python3` on PATH. A Debian python3 marks its
# own site-packages as externally managed (PEP 668), so there packages go to the user's site-packages instead.
pip_flags=()
if [ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')/EXTERNALLY-MANAGED" ]; then
  pip_flags=(--user --break-system-packages)
fi
