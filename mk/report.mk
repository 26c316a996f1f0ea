# Fleet report and AWX parts (issues 9, 10): Debian's Prometheus and headless Chromium for the report's
# integration tests, and the AWX survey generated from the collection's named MIG configs.
REPORT_DEBS := prometheus chromium-headless-shell fonts-dejavu-core

.PHONY: report-deps awx-survey report

report-deps: ## Prometheus + headless Chromium (Debian packages) for the report tests; installed when missing
	@command -v prometheus >/dev/null && command -v chromium-headless-shell >/dev/null || { \
	  echo "[report] installing $(REPORT_DEBS)"; \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$( [ "$$(id -u)" = 0 ] || echo sudo ) \
	    apt-get install -y -qq --no-install-recommends $(REPORT_DEBS) >/dev/null; }
	@prometheus --version 2>&1 | head -1

awx-survey: setup ## regenerate awx/surveys/mig-reconfigure.json from the named MIG configs
	$(BIN)/python awx/generate_survey.py

report: setup ## read-only fleet report of the cluster in KUBECONFIG (table + report.json/html in ./gpu-fleet-report)
	$(BIN)/ansible-playbook report.yml $(if $(PROMETHEUS_URL),-e gpu_report_prometheus_url=$(PROMETHEUS_URL))

INTEGRATION_DEPS += report-deps
