// Command migprofile answers, with NVIDIA's own code, how mig-parted reads MIG profile strings: built inside
// NVIDIA/mig-parted v0.15.0 (its vendored go-nvlib), it reads a JSON list of queries on stdin and writes one
// answer per query. A query is {"profile": "1c.3g.40gb", "parsed": {"c": 1, "g": 3, "gb": 40, "attrs": [],
// "negattrs": []} or null}; the answer says whether mig-parted's config validation accepts the string
// (types.AssertValidMigProfileFormat, what api/spec/v1 runs on every mig-devices key) and whether go-nvlib's
// parse of it is exactly "parsed" (MigProfileInfo.Matches compares C, G, GB and both attribute lists).
package main

import (
	"encoding/json"
	"os"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"

	"github.com/NVIDIA/mig-parted/pkg/types"
)

type parsed struct {
	C        int      `json:"c"`
	G        int      `json:"g"`
	GB       int      `json:"gb"`
	Attrs    []string `json:"attrs"`
	NegAttrs []string `json:"negattrs"`
}

type query struct {
	Profile string  `json:"profile"`
	Parsed  *parsed `json:"parsed"`
}

type answer struct {
	Profile string `json:"profile"`
	Valid   bool   `json:"valid"`
	Error   string `json:"error,omitempty"`
	Matches *bool  `json:"matches,omitempty"`
}

func main() {
	var queries []query
	if err := json.NewDecoder(os.Stdin).Decode(&queries); err != nil {
		os.Stderr.WriteString("migprofile: reading queries: " + err.Error() + "\n")
		os.Exit(2)
	}
	answers := make([]answer, 0, len(queries))
	for _, q := range queries {
		a := answer{Profile: q.Profile, Valid: true}
		if err := types.AssertValidMigProfileFormat(q.Profile); err != nil {
			a.Valid = false
			a.Error = err.Error()
		}
		if q.Parsed != nil {
			info := nvdev.MigProfileInfo{C: q.Parsed.C, G: q.Parsed.G, GB: q.Parsed.GB,
				Attributes: append([]string(nil), q.Parsed.Attrs...), NegAttributes: append([]string(nil), q.Parsed.NegAttrs...)}
			m := info.Matches(q.Profile)
			a.Matches = &m
		}
		answers = append(answers, a)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		os.Exit(1)
	}
}
