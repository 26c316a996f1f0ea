# The other ansible-core releases meta/runtime.yml's requires_ansible claims: sanity and the unit tests run on each,
# in a venv of its own (.venv-ansible-<version>); the main venv (requirements/dev.txt) runs lint, sanity, unit and
# integration on 2.19. ansible-core 2.20 and later need Python >= 3.12.
ANSIBLE_CORE_VERSIONS := 2.20.10 2.21.5
# The first Python >= 3.12 found: python3.13 or python3.12 on PATH, else pyenv's installed versions.
PYTHON_NEW ?= $(shell for p in python3.13 python3.12 $$HOME/.pyenv/versions/3.1[23]*/bin/python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { command -v "$$p"; break; }; done)
ANSIBLE_VERSIONS_STAMP = .venv-ansible-$(1)/.setup-$(shell cat requirements/runtime.txt requirements/unit.txt requirements/constraints.txt | sha256sum | cut -c1-16)

.PHONY: ansible-versions $(foreach v,$(ANSIBLE_CORE_VERSIONS),sanity-$(v) unit-$(v))

ansible-versions: $(foreach v,$(ANSIBLE_CORE_VERSIONS),sanity-$(v) unit-$(v)) ## sanity and unit tests on every other supported ansible-core

define ANSIBLE_VERSION_RULES
$(call ANSIBLE_VERSIONS_STAMP,$(1)): requirements/runtime.txt requirements/unit.txt requirements/constraints.txt
	@test -n "$(PYTHON_NEW)" || { echo "ansible-core $(1) needs Python >= 3.12: none found (python3.13, python3.12, ~/.pyenv/versions/3.12*)" >&2; exit 1; }
	@echo "[ansible-versions] ansible-core $(1) with $(PYTHON_NEW) in .venv-ansible-$(1)"
	@test -x .venv-ansible-$(1)/bin/python || $(PYTHON_NEW) -m venv .venv-ansible-$(1)
	.venv-ansible-$(1)/bin/python -m pip install -q ansible-core==$(1) -r requirements/runtime.txt -r requirements/unit.txt -c requirements/constraints.txt
	@rm -f .venv-ansible-$(1)/.setup-*; touch $$@

sanity-$(1): $(call ANSIBLE_VERSIONS_STAMP,$(1)) $(COLLECTION_LINK) ## ansible-test sanity on ansible-core $(1)
	PATH=$(CURDIR)/.venv-ansible-$(1)/bin:$$$$PATH ANSIBLE_TEST_PYTHON=$$$$(.venv-ansible-$(1)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])') tests/sanity/run.sh

unit-$(1): $(call ANSIBLE_VERSIONS_STAMP,$(1)) $(COLLECTION_LINK) ## unit tests on ansible-core $(1)
	.venv-ansible-$(1)/bin/python -m pytest tests/unit -q -p no:cacheprovider
endef
$(foreach v,$(ANSIBLE_CORE_VERSIONS),$(eval $(call ANSIBLE_VERSION_RULES,$(v))))
