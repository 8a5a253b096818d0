// Package redfish is the Redfish fence agent, built on gofish. It fences one
// ComputerSystem of a BMC (iDRAC, iLO, XCC, OpenBMC, ...):
//
//   - the session a device check holds open (agents.Keeper, package keep),
//     else one Redfish session per operation, always logged out; Basic auth
//     by basic_auth, or by itself (logged once) on a BMC with no session
//     service (a service root naming none, a login answered 404, 405 or
//     501), never after a refused password; HTTPS verified against the
//     system roots or ca_file, ssl_insecure only by choice and with a
//     warning;
//   - the system is systems_uri, else the plug, else the BMC's only system;
//   - the ResetType comes from what the BMC allows (the action's
//     AllowableValues or its @Redfish.ActionInfo): off is ForceOff, on is
//     On or ForceOn, and where the BMC offers neither, PushPowerButton,
//     pressed once and only from the opposite settled state; reboot is an
//     observed off then on;
//   - resets are sent with If-Match, poll 202 task monitors beside the
//     PowerState (a task may outlive the power change), ride out transient
//     5xx answers, dropped connections and one expired session; a login
//     refused for want of a session slot says so;
//   - the BMC's error messages are shown with their IDs, cleaned of
//     control characters and of our secrets, and bounded;
//   - every link the BMC hands out (service root Systems and Links.Sessions,
//     collection members, the Reset target and its ActionInfo, the session
//     and task monitor Locations) is resolved against the BMC's base URL
//     and followed only if it keeps the BMC's scheme, host and port; a
//     link elsewhere fails the operation, naming it. Independently, the
//     agent's HTTP transport refuses any request for another host or with
//     user information in its URL, including those gofish makes itself;
//   - success is only a PowerState read back within power_timeout, from the
//     URI the system was read at (never its @odata.id).
//
// Package redfishsim is the BMC simulator its tests run against;
// README.md lists the BMC quirks the agent knows and what it does with
// each.
package redfish
