package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/stonith/fencing"
)

func init() {
	extraCommands = append(extraCommands, newFenceCmd, newConfirmCmd, newUnfenceCmd, newHistoryCmd, newDeviceCmd, newStandbyCmd, newTransferCmd)
}

func newFenceCmd(a *app) *cobra.Command {
	var reboot, yes bool
	var reason string
	cmd := &cobra.Command{
		Use:   "fence NODE",
		Short: "Power NODE off through its fence topology (confirmed by read-back)",
		Long: `Fence NODE: the cluster's primary-elect powers it off through its configured
levels and devices and confirms the power-off by reading the state back. The
request is forwarded to the primary-elect and recorded in the history.
On a terminal, each device attempt is shown as it is recorded, and how long
the fence has run. Ctrl-C detaches: the fence goes on in the cluster (a fence
stopped half-way would leave the node in a state nobody asked for); follow it
with fencectl history NODE. Needs --yes. Exit status 0 only when the fence is
confirmed; 6 when detached.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return &exitError{code: exitNotConfirmed, err: fmt.Errorf("fencing %s powers it off: add --yes to proceed", args[0])}
			}
			action := fencing.ActionOff
			if reboot {
				action = fencing.ActionReboot
			}
			var rec fencing.Record
			started := time.Now()
			stop := a.followFence(cmd.Context(), args[0], started)
			err := a.call(cmd.Context(), "POST", "/v1/fence", nil, api.AdminRequest{Node: args[0], Action: action, Reason: reason}, &rec)
			stop()
			if err != nil {
				if cmd.Context().Err() != nil {
					// Ctrl-C detaches: the fence goes on in the cluster.
					return &exitError{code: exitNoAnswer, err: fmt.Errorf("detached: the fence of %s goes on in the cluster (Ctrl-C does not cancel it); follow it with `fencectl history %s`", args[0], args[0])}
				}
				return err
			}
			return a.printRecord(rec)
		},
	}
	withTimeout(cmd, timeoutAdmin)
	cmd.Flags().BoolVar(&reboot, "reboot", false, "power back on after the confirmed power-off")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the destructive action")
	cmd.Flags().StringVar(&reason, "reason", "manual fence", "reason recorded in the history")
	return cmd
}

func newConfirmCmd(a *app) *cobra.Command {
	var yes bool
	var reason string
	cmd := &cobra.Command{
		Use:   "confirm NODE",
		Short: "Record that NODE is down (manual override of a blocked takeover)",
		Long: `Confirm that NODE is powered off or otherwise cannot touch the shared storage,
when every fence path failed and a takeover is BLOCKED. This is a manual
acknowledgement: fenced believes you and lets another node mount the storage.
If NODE is in fact running, two nodes will write the storage at once.
Check it by hand (console, datacenter staff) first. The confirmation is
recorded in the history with your reason. Needs --yes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return &exitError{code: exitNotConfirmed, err: fmt.Errorf("confirming %s as down without a fence is dangerous: check it is really off, then add --yes", args[0])}
			}
			var rec fencing.Record
			if err := a.call(cmd.Context(), "POST", "/v1/confirm", nil, api.AdminRequest{Node: args[0], Reason: reason}, &rec); err != nil {
				return err
			}
			if a.output != "json" {
				fmt.Fprintf(a.errw, "WARNING: %s recorded as down by manual confirmation (history id %d). No fence was run.\n", args[0], rec.ID)
			}
			return a.printRecord(rec)
		},
	}
	withTimeout(cmd, timeoutAdmin)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm that the node is really down")
	cmd.Flags().StringVar(&reason, "reason", "manual confirmation: node verified down by an administrator", "reason recorded in the history")
	return cmd
}

func newUnfenceCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "unfence NODE",
		Short: "Power NODE back on (or restore its zoning) through its devices",
		Long: `Unfence NODE: power it on, or restore its fabric zoning, through the devices
of the level that last fenced it (all levels if none did). It then rejoins as a
secondary and learns the current epoch before doing anything else.

It is also the admin's consent for NODE to unfence itself at start (SCSI-3
reservations: fence_scsi, fence_mpath; devices with unfence: on_start). A node
fenced during its current boot does not undo that fence on its own — a crashed
daemon's application may still write there — until it reboots or this command
runs. Run it only once nothing of the group runs on NODE.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rec fencing.Record
			if err := a.call(cmd.Context(), "POST", "/v1/unfence", nil, api.AdminRequest{Node: args[0], Reason: reason}, &rec); err != nil {
				return err
			}
			return a.printRecord(rec)
		},
	}
	withTimeout(cmd, timeoutAdmin)
	cmd.Flags().StringVar(&reason, "reason", "manual unfence", "reason recorded in the history")
	return cmd
}

// followFence shows a running fence's progress on a terminal: each device
// attempt as the history records it (the executing node commits one after
// every attempt), and every few seconds how long it has run. It stops when
// stop is called.
func (a *app) followFence(ctx context.Context, target string, since time.Time) (stop func()) {
	if a.output == "json" || !isTerminal(a.errw) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		shown := 0
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		lastBeat := time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var h api.History
			q := url.Values{"node": {target}}
			if a.call(ctx, "GET", "/v1/history", q, nil, &h) == nil {
				for _, r := range h.Records {
					if r.Kind != fencing.KindFence || r.Target != target || r.Started.Before(since.Add(-2*time.Second)) {
						continue
					}
					for ; shown < len(r.Attempts); shown++ {
						at := r.Attempts[shown]
						fmt.Fprintf(a.errw, "  level %d, device %s (%s), try %d: %s %s, read back %s, %v\n", at.Level, cell(at.Device), cell(at.Agent),
							at.Try, cell(at.Action), cell(at.Result), cell(at.ReadBack), at.Duration.Round(time.Millisecond))
					}
				}
			}
			if time.Since(lastBeat) >= 2*time.Second {
				lastBeat = time.Now()
				fmt.Fprintf(a.errw, "  fencing %s: %v so far (Ctrl-C detaches; the fence goes on)\n", target, time.Since(since).Round(100*time.Millisecond))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (a *app) printRecord(rec fencing.Record) error {
	if a.output == "json" {
		if err := a.printJSON(api.RecordReply{SchemaVersion: api.SchemaVersion, Record: rec}); err != nil {
			return err
		}
	} else {
		printRecords(a, []fencing.Record{rec}, true)
	}
	if rec.Outcome != fencing.OutcomeSuccess {
		return &exitError{code: exitFailure, err: fmt.Errorf("%s %s: %s: %s", rec.Kind, rec.Target, rec.Outcome, rec.Error)}
	}
	return nil
}

func printRecords(a *app, recs []fencing.Record, verbose bool) {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tKIND\tTARGET\tACTION\tOUTCOME\tEPOCH\tBY\tDURATION\tDETAIL")
	for _, r := range recs {
		dur := "-"
		if !r.Finished.IsZero() {
			dur = r.Finished.Sub(r.Started).Round(time.Millisecond).String()
		}
		detail := r.Reason
		if r.Error != "" {
			detail = r.Error
		}
		if r.Runs > 1 {
			detail = fmt.Sprintf("%d runs, the last: %s", r.Runs, detail)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Started.Local().Format(timeMillis), cell(r.Kind), cell(r.Target),
			cell(r.Action), strings.ToUpper(cell(r.Outcome)), r.Epoch, cell(r.RequestedBy), dur, cell(detail))
		if verbose {
			for _, at := range r.Attempts {
				line := fmt.Sprintf("\t  level %d\t%s\t%s\t%s\t%s\t\tread back %s\t%s\t%s", at.Level, cell(at.Device), cell(at.Agent), cell(at.Action), cell(at.Result),
					cell(at.ReadBack), at.Duration.Round(time.Millisecond), api.EscapeText(at.Error))
				fmt.Fprintln(tw, line)
			}
		}
	}
	tw.Flush()
}

func newDeviceCmd(a *app) *cobra.Command {
	dev := &cobra.Command{Use: "device", Short: "List fence devices and check them"}
	dev.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the fence devices, the nodes they fence, and their health as checked from this node",
		Long: `List the configured fence devices, the nodes each fences, and what this node's
last check of each found: HEALTH (ok, FAILING with the kind of error — auth,
unreachable, other — and for how long, pending, or "not checked here" for a
device that fences only this node: the other nodes check it), when the last
check ran, how long it took, and its error. HEALTH also says "(session held)"
while this node holds a session open on the device for the next fence, and
ERROR notes a BMC with no free session slot (the check ran on the held
session). Every node checks each device that fences another node every
devices.NAME.monitor_interval (default 60s), with a status query, never a
power action.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out api.DeviceList
			if err := a.call(cmd.Context(), "GET", "/v1/devices", nil, nil, &out); err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DEVICE\tAGENT\tFENCES\tHEALTH\tLAST CHECK\tLATENCY\tERROR")
			now := time.Now()
			for _, d := range out.Devices {
				state, checked, latency, errText := healthCells(d.Health, now)
				// The row names the device: its error need not.
				errText = strings.TrimPrefix(errText, "device "+d.Name+": ")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(d.Name), cell(d.Agent), cell(strings.Join(d.Targets, ", ")), state, checked, latency, errText)
			}
			return tw.Flush()
		},
	})
	dev.AddCommand(withTimeout(&cobra.Command{
		Use:   "status DEVICE",
		Short: "Check DEVICE from this node (monitor and each node's state); changes nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ds api.DeviceStatus
			if err := a.call(cmd.Context(), "GET", "/v1/devices/"+url.PathEscape(args[0])+"/status", nil, nil, &ds); err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(ds)
			}
			monitor := "ok"
			if ds.Monitor != "ok" {
				monitor = "FAILED: " + api.EscapeText(ds.Monitor)
			}
			fmt.Fprintf(a.out, "Device %s (%s): monitor %s\n", cell(ds.Device), cell(ds.Agent), monitor)
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tPLUG\tSTATE\tERROR")
			for _, t := range ds.Targets {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(t.Node), cell(t.Plug), cell(t.State), api.EscapeText(t.Error))
			}
			tw.Flush()
			if ds.Monitor != "ok" {
				return &exitError{code: exitFailure, err: fmt.Errorf("device %s: monitor failed: %s", ds.Device, api.EscapeText(ds.Monitor))}
			}
			return nil
		},
	}, timeoutDevice))
	return dev
}

func newStandbyCmd(a *app) *cobra.Command {
	var off bool
	cmd := &cobra.Command{
		Use:   "standby NODE",
		Short: "Keep NODE from being primary (a primary hands over gracefully, no fence)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out api.StandbyReply
			if err := a.call(cmd.Context(), "POST", "/v1/standby", nil, api.AdminRequest{Node: args[0], Flag: !off}, &out); err != nil {
				return err
			}
			out.SchemaVersion = api.SchemaVersion
			if a.output == "json" {
				return a.printJSON(out)
			}
			if off {
				fmt.Fprintf(a.out, "%s may be primary again\n", args[0])
			} else {
				fmt.Fprintf(a.out, "%s is in standby\n", args[0])
			}
			return nil
		},
	}
	withTimeout(cmd, timeoutChange)
	cmd.Flags().BoolVar(&off, "off", false, "take NODE out of standby")
	return cmd
}

func newTransferCmd(a *app) *cobra.Command {
	return withTimeout(&cobra.Command{
		Use:   "transfer [NODE]",
		Short: "Hand primacy over gracefully (release, then move leadership), no fence",
		Long: "Hand primacy over gracefully: the primary releases the group and raft leadership moves to NODE, or\n" +
			"to the next node that may hold primacy. Refused, with the group left running where it is, when NODE\n" +
			"(or every other node) is a witness, in standby or not reachable.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.AdminRequest{}
			if len(args) == 1 {
				req.Node = args[0]
			}
			var out api.TransferReply
			if err := a.call(cmd.Context(), "POST", "/v1/transfer", nil, req, &out); err != nil {
				return err
			}
			out.SchemaVersion = api.SchemaVersion
			if a.output == "json" {
				return a.printJSON(out)
			}
			to := out.To
			if to == "" {
				to = "the node raft picks"
			}
			fmt.Fprintf(a.out, "handover from %s to %s started\n", cell(out.From), cell(to))
			return nil
		},
	}, timeoutChange)
}
