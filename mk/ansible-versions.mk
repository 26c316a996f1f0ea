# The other ansible-core releases meta/runtime.yml's requires_ansible claims: sanity runs on each,
# in a venv of its own (.venv-ansible-<version>); the main venv (requirements/dev.txt) runs lint, sanity, unit and
# integration on the newest, 2.21. 2.19 runs on Python 3.11, the oldest Python the collection supports on the
# controller; 2.20 on the main venv's Python (>= 3.12, which ansible-core 2.20 needs).
ANSIBLE_CORE_VERSIONS := 2.19.14 2.20.10
# The unit tests run on each of them here too (2.19 with the oldest Python), and on the newest in the main venv.
ANSIBLE_CORE_UNIT_VERSIONS := 2.19.14 2.20.10
# The first Python 3.11 found: python3.11 on PATH, else pyenv's installed 3.11.
PYTHON_OLDEST ?= $(shell for p in python3.11 $$HOME/.pyenv/versions/3.11*/bin/python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1 && { command -v "$$p"; break; }; done)
PYTHON_FOR_2.19.14 = $(PYTHON_OLDEST)
PYTHON_FOR_2.20.10 = $(PYTHON)
ANSIBLE_VERSIONS_STAMP = .venv-ansible-$(1)/.setup-$(shell cat requirements/runtime.txt requirements/unit.txt requirements/constraints.txt | sha256sum | cut -c1-16)

.PHONY: ansible-versions $(foreach v,$(ANSIBLE_CORE_VERSIONS),sanity-$(v) unit-$(v))

ansible-versions: $(foreach v,$(ANSIBLE_CORE_VERSIONS),sanity-$(v)) $(foreach v,$(ANSIBLE_CORE_UNIT_VERSIONS),unit-$(v)) ## sanity and unit tests on every other supported ansible-core

define ANSIBLE_VERSION_RULES
$(call ANSIBLE_VERSIONS_STAMP,$(1)): requirements/runtime.txt requirements/unit.txt requirements/constraints.txt
	@test -n "$(PYTHON_FOR_$(1))" || { echo "ansible-core $(1): no Python for it found (mk/ansible-versions.mk: PYTHON_OLDEST is python3.11 or ~/.pyenv/versions/3.11*, PYTHON is >= 3.12)" >&2; exit 1; }
	@echo "[ansible-versions] ansible-core $(1) with $(PYTHON_FOR_$(1)) in .venv-ansible-$(1)"
	@test -x .venv-ansible-$(1)/bin/python || $(PYTHON_FOR_$(1)) -m venv .venv-ansible-$(1)
	.venv-ansible-$(1)/bin/python -m pip install -q ansible-core==$(1) -r requirements/runtime.txt -r requirements/unit.txt -c requirements/constraints.txt
	@rm -f .venv-ansible-$(1)/.setup-*; touch $$@

sanity-$(1): $(call ANSIBLE_VERSIONS_STAMP,$(1)) $(COLLECTION_LINK) ## ansible-test sanity on ansible-core $(1)
	PATH=$(CURDIR)/.venv-ansible-$(1)/bin:$$$$PATH ANSIBLE_TEST_PYTHON=$$$$(.venv-ansible-$(1)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])') tests/sanity/run.sh

unit-$(1): $(call ANSIBLE_VERSIONS_STAMP,$(1)) $(COLLECTION_LINK) ## unit tests on ansible-core $(1)
	.venv-ansible-$(1)/bin/python -m pytest tests/unit -q -p no:cacheprovider
endef
$(foreach v,$(ANSIBLE_CORE_VERSIONS),$(eval $(call ANSIBLE_VERSION_RULES,$(v))))
