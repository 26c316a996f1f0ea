// dpconfig: NVIDIA's device-plugin config parser (github.com/NVIDIA/k8s-device-plugin api/config/v1) and the
// device plugin's start-up checks, as an oracle for the tests.
//
// Reads JSON lines on stdin: {"id": "...", "config": "<YAML or JSON text of one config file>", "env": {"MIG_STRATEGY": "mixed", ...}}
// and writes one JSON line per input: {"id", "accepted", "stage" (parse|validate|""), "error",
// "sharing_strategy", "mig_strategy", "resources": [{"name", "rename", "replicas"}]}.
//
// The flag list below mirrors cmd/nvidia-device-plugin/main.go v0.20.0 (names, env vars, defaults) because that
// package is a main package and cannot be imported; the config parsing and the flag precedence (command line, then
// environment, then file) are NVIDIA's own code (spec.NewConfig, Flags.UpdateFromCLIFlags).
// validate() mirrors main.go's validateFlags minus the NVML probe (the plugin runs on an NVML host).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"
)

type request struct {
	ID     string            `json:"id"`
	Config *string           `json:"config"`
	Env    map[string]string `json:"env"`
}

type resource struct {
	Name     string `json:"name"`
	Rename   string `json:"rename"`
	Replicas int    `json:"replicas"`
}

type verdict struct {
	ID              string     `json:"id"`
	Accepted        bool       `json:"accepted"`
	Stage           string     `json:"stage"`
	Error           string     `json:"error"`
	SharingStrategy string     `json:"sharing_strategy"`
	MigStrategy     string     `json:"mig_strategy"`
	RenameByDefault bool       `json:"rename_by_default"`
	Resources       []resource `json:"resources"`
}

// envNames are the environment variables the device plugin reads (cmd/nvidia-device-plugin/main.go).
var envNames = []string{"MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT", "PASS_DEVICE_SPECS",
	"DEVICE_LIST_STRATEGY", "DEVICE_ID_STRATEGY", "GDRCOPY_ENABLED", "GDS_ENABLED", "MOFED_ENABLED", "KUBELET_SOCKET",
	"CONFIG_FILE", "CDI_ANNOTATION_PREFIX", "NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH", "DRIVER_ROOT_CTR_PATH",
	"CONTAINER_DRIVER_ROOT", "MPS_ROOT", "SHARED_DEVICES_ALLOCATION_POLICY", "DEVICE_DISCOVERY_STRATEGY", "IMEX_CHANNEL_IDS",
	"IMEX_REQUIRED", "CDI_FEATURE_FLAGS", "CDI_DISABLE_HOOKS"}

func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.StringFlag{Name: "driver-root", Aliases: []string{"nvidia-driver-root"}, Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "dev-root", Aliases: []string{"nvidia-dev-root"}, EnvVars: []string{"NVIDIA_DEV_ROOT"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false, EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(string(spec.DeviceListStrategyEnvVar)), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.BoolFlag{Name: "gdrcopy-enabled", EnvVars: []string{"GDRCOPY_ENABLED"}},
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "kubelet-socket", EnvVars: []string{"KUBELET_SOCKET"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Aliases: []string{"nvidia-ctk-path"}, Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "shared-devices-allocation-policy", Value: spec.AllocationPolicyDistributed, EnvVars: []string{"SHARED_DEVICES_ALLOCATION_POLICY"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
		&cli.StringSliceFlag{Name: "cdi-feature-flags", EnvVars: []string{"CDI_FEATURE_FLAGS"}},
		&cli.StringSliceFlag{Name: "cdi-disable-hooks", EnvVars: []string{"CDI_DISABLE_HOOKS"}},
	}
}

// validate mirrors validateFlags of cmd/nvidia-device-plugin/main.go v0.20.0 (NVML present).
func validate(config *spec.Config) error {
	if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	if *config.Flags.Plugin.DeviceIDStrategy != spec.DeviceIDStrategyUUID && *config.Flags.Plugin.DeviceIDStrategy != spec.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", *config.Flags.Plugin.DeviceIDStrategy)
	}
	if config.Flags.Plugin.SharedDevicesAllocationPolicy != nil {
		switch *config.Flags.Plugin.SharedDevicesAllocationPolicy {
		case spec.AllocationPolicyDistributed, spec.AllocationPolicyPacked:
		default:
			return fmt.Errorf("invalid --shared-devices-allocation-policy option: %s", *config.Flags.Plugin.SharedDevicesAllocationPolicy)
		}
	}
	if config.Sharing.SharingStrategy() == spec.SharingStrategyMPS {
		if *config.Flags.MigStrategy == spec.MigStrategyMixed {
			return fmt.Errorf("using --mig-strategy=mixed is not supported with MPS")
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			return fmt.Errorf("using MPS requires --mps-root to be specified")
		}
	}
	switch *config.Flags.DeviceDiscoveryStrategy {
	case "auto", "nvml", "tegra":
	default:
		return fmt.Errorf("invalid --device-discovery-strategy option %v", *config.Flags.DeviceDiscoveryStrategy)
	}
	switch *config.Flags.MigStrategy {
	case spec.MigStrategyNone, spec.MigStrategySingle, spec.MigStrategyMixed:
	default:
		return fmt.Errorf("unknown MIG strategy: %v", *config.Flags.MigStrategy)
	}
	if err := spec.AssertChannelIDsValid(config.Imex.ChannelIDs); err != nil {
		return fmt.Errorf("invalid IMEX channel IDs: %w", err)
	}
	return nil
}

func check(req request, dir string) verdict {
	v := verdict{ID: req.ID}
	for _, name := range envNames {
		os.Unsetenv(name)
	}
	for k, val := range req.Env {
		os.Setenv(k, val)
	}
	args := []string{"dpconfig"}
	if req.Config != nil {
		file := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(file, []byte(*req.Config), 0o600); err != nil {
			v.Stage, v.Error = "io", err.Error()
			return v
		}
		args = append(args, "--config-file", file)
	}
	app := cli.NewApp()
	app.Flags = pluginFlags()
	app.Action = func(c *cli.Context) error {
		// loadConfig + startPlugins of cmd/nvidia-device-plugin/main.go, up to validateFlags.
		config, err := spec.NewConfig(c, app.Flags)
		if err != nil {
			v.Stage, v.Error = "parse", fmt.Sprintf("unable to load config: unable to finalize config: %v", err)
			return nil
		}
		config.Flags.GFD = nil
		spec.DisableResourceNamingInConfig(config)
		if err := validate(config); err != nil {
			v.Stage, v.Error = "validate", fmt.Sprintf("unable to validate flags: %v", err)
			return nil
		}
		v.Accepted = true
		v.SharingStrategy = string(config.Sharing.SharingStrategy())
		v.MigStrategy = *config.Flags.MigStrategy
		rr := config.Sharing.ReplicatedResources()
		v.RenameByDefault = rr.RenameByDefault
		for _, r := range rr.Resources {
			v.Resources = append(v.Resources, resource{Name: string(r.Name), Rename: string(r.Rename), Replicas: r.Replicas})
		}
		return nil
	}
	if err := app.Run(args); err != nil {
		v.Stage, v.Error = "cli", err.Error()
	}
	return v
}

func main() {
	dir, err := os.MkdirTemp("", "dpconfig")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request line:", err)
			os.Exit(2)
		}
		if err := out.Encode(check(req, dir)); err != nil {
			os.Exit(1)
		}
	}
}
