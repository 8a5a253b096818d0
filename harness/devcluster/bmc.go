package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/daemon/config"
)

// BMCPassword is the simulated BMCs' password; it lives in a file the
// nodes read (password_file), never on a command line.
const BMCPassword = "fence-demo-secret"

// startBMCs gives every node a simulated IPMI BMC (go-ipmi's reference BMC
// on loopback) whose power-off kills the node's whole process group and
// whose power-on starts it again, and fences each node through its BMC.
func (c *Cluster) startBMCs(cfg *config.Config) error {
	pwFile := filepath.Join(c.Opts.Dir, "bmc-password")
	if err := os.WriteFile(pwFile, []byte(BMCPassword+"\n"), 0o600); err != nil {
		return err
	}
	if cfg.Devices == nil {
		cfg.Devices = map[string]config.Device{}
	}
	for i := range cfg.Nodes {
		bc := ipmisim.BMCConfig{
			Password:  BMCPassword,
			PoweredOn: true,
			OnPowerOff: func() error {
				c.Nodes[i].Kill()
				if c.Opts.PowerOff != nil {
					c.Opts.PowerOff(i)
				}
				return nil
			},
			OnPowerOn: func() error {
				if c.Opts.PowerOn != nil {
					if err := c.Opts.PowerOn(i); err != nil {
						return err
					}
				}
				return c.Nodes[i].Start()
			},
		}
		if c.Opts.BMCConfig != nil {
			c.Opts.BMCConfig(i, &bc)
		}
		b, err := ipmisim.StartBMC(bc)
		if err != nil {
			c.closeBMCs()
			return err
		}
		c.BMCs = append(c.BMCs, b)
		dev := fmt.Sprintf("%s-bmc", cfg.Nodes[i].Name)
		cfg.Devices[dev] = config.Device{Agent: "ipmi", Params: map[string]string{
			"ip": b.Host(), "ipport": strconv.Itoa(b.Port()), "username": "admin", "password_file": pwFile,
			"lanplus": "1", "cipher": "17", "power_timeout": "5", "login_timeout": "2", "command_timeout": "1",
		}}
		cfg.Nodes[i].Fence = []config.Level{{Devices: []config.DeviceRef{{Device: dev}}}}
	}
	return nil
}

func (c *Cluster) closeBMCs() {
	for _, b := range c.BMCs {
		b.Close()
	}
	c.BMCs = nil
}
