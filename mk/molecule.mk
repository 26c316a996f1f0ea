# Host roles (nvidia_driver, container_toolkit) proven with Molecule + testinfra on real Debian root filesystems:
# debootstrap makes them (cached under $(GPUFLEET_CACHE)/molecule), Ansible reaches them with community.general.chroot.
# Needs root (debootstrap, chroot, mount) and Go (nvidia-ctk is built from its Go module). docs/host-roles.md.
MOLECULE_SCENARIOS ?= nvidia_driver container_toolkit
MOLECULE_TOOLS := extensions/molecule/tools

.PHONY: molecule-deps molecule-rootfs molecule-nvidia-ctk molecule molecule-destroy

molecule-deps: ## root check; debootstrap and gcc from apt when missing; Go must be on PATH
	@test "$$(id -u)" = 0 || { echo "[molecule] debootstrap, chroot and mount need root" >&2; exit 1; }
	@command -v go >/dev/null || { echo "[molecule] Go toolchain not on PATH (needed to build nvidia-ctk)" >&2; exit 1; }
	@if ! command -v debootstrap >/dev/null || ! command -v gcc >/dev/null; then \
	  echo "[molecule] installing debootstrap and gcc with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap gcc >/dev/null; \
	fi

molecule-rootfs: molecule-deps ## cached Debian 12 minbase root filesystem tarball (cold: a few minutes)
	$(MOLECULE_TOOLS)/build-rootfs.sh bookworm

molecule-nvidia-ctk: molecule-deps ## nvidia-ctk built from its Go module at the pinned version (cold: a few minutes)
	$(MOLECULE_TOOLS)/build-nvidia-ctk.sh

molecule: setup molecule-rootfs molecule-nvidia-ctk ## Molecule: check, converge, idempotence, verify of each host-role scenario
	@for scenario in $(MOLECULE_SCENARIOS); do \
	  echo "[molecule] scenario $$scenario"; \
	  $(BIN)/molecule test -s $$scenario || exit 1; \
	done

molecule-destroy: setup ## unmount and remove every scenario's root filesystems (after an interrupted run)
	@for scenario in $(MOLECULE_SCENARIOS); do $(BIN)/molecule destroy -s $$scenario || exit 1; done

TEST_EXTRA += molecule
