# Galaxy import check (issue 17): galaxy-importer (PyPI, pinned in requirements/dev.txt) on the built tarball, as
# Galaxy/Automation Hub import it. Its ansible-test run is off in galaxy-importer.cfg (make sanity runs ansible-test).
COLLECTION_VERSION := $(shell awk '/^version:/ {print $$2}' galaxy.yml)
COLLECTION_TARBALL := build/gpufleet-gpu_operator-$(COLLECTION_VERSION).tar.gz

.PHONY: galaxy-import

galaxy-import: build ## galaxy-importer on the built collection (fails on any import error or ERROR line)
	# Run in build/: the importer writes importer_result.json to its working directory.
	cd build && GALAXY_IMPORTER_CONFIG=$(CURDIR)/galaxy-importer.cfg $(CURDIR)/$(BIN)/python -m galaxy_importer.main \
	  $(notdir $(COLLECTION_TARBALL)) > galaxy-import.log 2>&1 || { cat galaxy-import.log; exit 1; }
	@grep -E '^(WARNING|ERROR)' build/galaxy-import.log || true
	@! grep -q '^ERROR' build/galaxy-import.log
	@echo "[galaxy-import] $(COLLECTION_TARBALL) imports cleanly (log: build/galaxy-import.log)"

TEST_EXTRA += galaxy-import
