# gwbatch: two commands on a fresh machine with Python >= 3.11 and pip.
#   make demo   virtual environment, install, simulate data, run the demo campaign, say where results are
#   make test   the test suite (CPU only; GPU tests run on a GPU machine with: pytest -m gpu)
#   make gw150914-spiir  the SPIIR search on the bundled GW150914 data (needs the test extra's lalsuite)
#   make gw150914-burst  the unmodelled burst search on the bundled GW150914 data
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gwbatch-installed

DEMO_STORE := data/demo.zarr
DEMO_SIM   := --ifos H1,L1,V1 --duration 1024 --sample-rate 2048 --seed 1 --injections 60

.PHONY: demo test install pulsar gw150914 gw150914-spiir gw150914-burst clean

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

GW150914_FILES := tests/data/gw150914/H-H1_LOSC_4_V2-1126259446-32.hdf5 tests/data/gw150914/L-L1_LOSC_4_V2-1126259446-32.hdf5

gw150914: $(STAMP)
	$(BIN)/gwbatch ingest gwosc $(GW150914_FILES) --out data/gw150914.zarr --overwrite
	$(BIN)/gwbatch run configs/gw150914-pulse.yaml --overwrite

gw150914-burst: $(STAMP)
	$(BIN)/gwbatch ingest gwosc $(GW150914_FILES) --out data/gw150914.zarr --overwrite
	$(BIN)/gwbatch run configs/gw150914-burst.yaml --overwrite

# The SPIIR search with the 2901-template BBH bank: the banks (one per detector PSD) take ~45 min
# each on two cores the first time and are cached in runs/gw150914/banks/ for later runs.
gw150914-spiir: $(STAMP)
	$(BIN)/gwbatch ingest gwosc $(GW150914_FILES) --out data/gw150914.zarr --overwrite
	$(BIN)/python benchmarks/gw150914.py --out runs/gw150914

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) data runs .pytest_cache .hypothesis
