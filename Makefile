# gwbatch: two commands on a fresh machine with Python >= 3.11 and pip.
#   make demo   virtual environment, install, simulate data, run the demo campaign, say where results are
#   make test   the test suite (CPU only; GPU tests run on a GPU machine with: pytest -m gpu); runs `make browser`
#               first, best effort: it never fails the tests, which skip the browser test without Chromium
#   make browser  Chromium for the report's headless-browser test: Debian's package, installed with apt-get
#               when no chromium is on PATH and we are root; otherwise says the browser test will be skipped
#   make radio     the radio search on the bundled synthetic pulsar filterbank
#   make pulsar    the pulse search on the bundled J1807-0847 time series
#   make gw150914  the pulse search on the bundled GW150914 data
#   make gw150914-spiir  the SPIIR search on the bundled GW150914 data (needs the test extra's lalsuite)
#   make gw150914-burst  the unmodelled burst search on the bundled GW150914 data
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gwbatch-installed

DEMO_STORE := data/demo.zarr
DEMO_SIM   := --ifos H1,L1,V1 --duration 1024 --sample-rate 2048 --seed 1 --injections 60

.PHONY: demo test install browser pulsar radio gw150914 gw150914-spiir gw150914-burst clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gwbatch needs Python >= 3.11; found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV) || { $(PYTHON) -m pip install --user virtualenv && $(PYTHON) -m virtualenv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gwbatch simulate $(DEMO_SIM) --out $(DEMO_STORE) --overwrite
	$(BIN)/gwbatch run configs/demo.yaml --overwrite
	@echo "open runs/demo/report.html for the report"

pulsar: $(STAMP)
	$(BIN)/gwbatch ingest sigproc tests/data/pulsar-j1807/GBT_J1807-0847.tim --out data/pulsar-j1807.zarr --overwrite
	$(BIN)/gwbatch run configs/pulsar-j1807.yaml --overwrite

radio: $(STAMP)
	$(BIN)/gwbatch ingest filterbank tests/data/radio/tutorial.fil --out data/radio-tutorial.zarr --overwrite
	$(BIN)/gwbatch run configs/radio-tutorial.yaml --overwrite

GW150914_FILES := tests/data/gw150914/H-H1_LOSC_4_V2-1126259446-32.hdf5 tests/data/gw150914/L-L1_LOSC_4_V2-1126259446-32.hdf5

gw150914: $(STAMP)
	$(BIN)/gwbatch ingest gwosc $(GW150914_FILES) --out data/gw150914.zarr --overwrite
	$(BIN)/gwbatch run configs/gw150914-pulse.yaml --overwrite

gw150914-burst: $(STAMP)
	$(BIN)/gwbatch ingest gwosc $(GW150914_FILES) --out data/gw150914.zarr --overwrite
	$(BIN)/gwbatch run configs/gw150914-burst.yaml --overwrite

# The SPIIR search with the 2901-template BBH bank: the banks (one per detector PSD) take about 2 min
# each on two cores the first time and are cached in runs/gw150914/banks/; the search about 8 min.
gw150914-spiir: $(STAMP)
	$(BIN)/gwbatch ingest gwosc $(GW150914_FILES) --out data/gw150914.zarr --overwrite
	$(BIN)/python benchmarks/gw150914.py --out runs/gw150914

# Best effort: every branch succeeds, so `make test` never fails here (tests/test_report_browser.py
# skips without a browser, or fails when GWBATCH_REQUIRE_BROWSER=1, as in .ci/run).
BROWSERS := chromium chromium-browser google-chrome

browser:
	@found=""; for b in $(BROWSERS); do command -v $$b >/dev/null 2>&1 && { found=$$b; break; }; done; \
	if [ -n "$$found" ]; then \
		echo "browser: $$(command -v $$found) (for tests/test_report_browser.py)"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "browser: installing Debian's chromium for tests/test_report_browser.py"; \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } \
			|| echo "browser: could not install chromium; the browser tests will be skipped"; \
	else \
		echo "browser: no chromium on PATH and no way to install it (needs apt-get and root); the browser tests will be skipped"; \
	fi

test: $(STAMP)
	-@$(MAKE) --no-print-directory browser
	$(BIN)/python -m pytest -q -n 2

clean:
	rm -rf $(VENV) data runs .pytest_cache .hypothesis
