package fabricsim

// ExampleZoning is a small fabric with three hosts and a two-port storage
// array, zoned the common ways: single-initiator zones by WWPN, a zone by
// alias, and a peer zone with the array as principal.
//
//	host1 HBA ports 10:00:00:00:c9:aa:00:01 and :02
//	host2 HBA port  10:00:00:00:c9:bb:00:01 (zoned through alias host2_hba0)
//	host3 HBA port  10:00:00:00:c9:cc:00:01 (in the peer zone)
//	array ports     50:06:01:60:3e:a0:00:01 and :02
func ExampleZoning() Zoning {
	return Zoning{
		Aliases: []Alias{
			{Name: "host2_hba0", Members: []string{"10:00:00:00:c9:bb:00:01"}},
			{Name: "array_spa", Members: []string{"50:06:01:60:3e:a0:00:01"}},
		},
		Zones: []Zone{
			{Name: "z_host1_a", Members: []string{"10:00:00:00:c9:aa:00:01", "50:06:01:60:3e:a0:00:01"}},
			{Name: "z_host1_b", Members: []string{"10:00:00:00:c9:aa:00:02", "50:06:01:60:3e:a0:00:02"}},
			{Name: "z_host2", Members: []string{"host2_hba0", "array_spa"}},
			{Name: "z_peer_array", Type: 1,
				Principals: []string{"50:06:01:60:3e:a0:00:01", "50:06:01:60:3e:a0:00:02"},
				Members:    []string{"10:00:00:00:c9:aa:00:01", "10:00:00:00:c9:cc:00:01"}},
		},
		Cfgs:              []Cfg{{Name: "cfg_prod", Zones: []string{"z_host1_a", "z_host1_b", "z_host2", "z_peer_array"}}},
		Enabled:           "cfg_prod",
		DefaultZoneAccess: 0,
	}
}
