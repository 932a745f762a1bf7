package amdgpu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// files is a fixture: path under the fixture's root -> content; a path
// ending in "/" is a directory.
type files map[string]string

func write(t testing.TB, root string, f files) {
	t.Helper()
	for rel, body := range f {
		p := filepath.Join(root, rel)
		if rel[len(rel)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// amdCard adds card<num>, an AMD GPU as the amdgpu driver lays it out under
// /sys/class/drm (drivers/gpu/drm/amd/pm/amdgpu_pm.c, amdgpu_vram_mgr.c):
// the PCI device's uevent, busy percentages, memory sizes in bytes,
// unique_id, its DRM minors (cardN and renderD<render>) and its hwmon
// (amdgpu_pm.c's hwmon attributes: m°C, µW, Hz), and a display connector
// beside it (card<num>-DP-1), which is not a card.
func amdCard(f files, num, render int, pci, uniqueID string) files {
	c := "sys/class/drm/card" + strconv.Itoa(num) + "/"
	d := c + "device/"
	f[c+"dev"] = "226:" + strconv.Itoa(num) + "\n"
	f[c+"uevent"] = "MAJOR=226\nMINOR=" + strconv.Itoa(num) + "\nDEVNAME=dri/card" + strconv.Itoa(num) + "\nDEVTYPE=drm_minor\n"
	f["sys/class/drm/card"+strconv.Itoa(num)+"-DP-1/status"] = "disconnected\n"
	f["sys/class/drm/renderD"+strconv.Itoa(render)+"/dev"] = "226:" + strconv.Itoa(render) + "\n"
	f[d+"uevent"] = "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:740F\nPCI_SUBSYS_ID=1002:0C34\nPCI_SLOT_NAME=" + pci +
		"\nMODALIAS=pci:v00001002d0000740Fsv00001002sd00000C34bc03sc80i00\n"
	f[d+"vendor"] = "0x1002\n"
	f[d+"gpu_busy_percent"] = "37\n"
	f[d+"mem_busy_percent"] = "12\n"
	f[d+"mem_info_vram_total"] = "68702699520\n"
	f[d+"mem_info_vram_used"] = "1073741824\n"
	f[d+"mem_info_vis_vram_total"] = "68702699520\n"
	f[d+"mem_info_vis_vram_used"] = "1073741824\n"
	f[d+"mem_info_gtt_total"] = "134180323328\n"
	f[d+"mem_info_gtt_used"] = "11464704\n"
	f[d+"mem_info_vram_vendor"] = "hynix\n"
	f[d+"power_dpm_force_performance_level"] = "auto\n"
	f[d+"pp_dpm_sclk"] = "0: 500Mhz\n1: 1700Mhz *\n"
	if uniqueID != "" {
		f[d+"unique_id"] = uniqueID + "\n"
	}
	f[d+"product_name"] = "AMD Instinct MI210\n"
	f[d+"drm/card"+strconv.Itoa(num)+"/dev"] = "226:" + strconv.Itoa(num) + "\n"
	f[d+"drm/renderD"+strconv.Itoa(render)+"/dev"] = "226:" + strconv.Itoa(render) + "\n"
	h := d + "hwmon/hwmon" + strconv.Itoa(num+3) + "/"
	f[h+"name"] = "amdgpu\n"
	f[h+"temp1_input"] = "45000\n"
	f[h+"temp1_label"] = "edge\n"
	f[h+"temp2_input"] = "52000\n"
	f[h+"temp2_label"] = "junction\n"
	f[h+"temp3_input"] = "61000\n"
	f[h+"temp3_label"] = "mem\n"
	f[h+"power1_average"] = "281000000\n"
	f[h+"power1_cap"] = "300000000\n"
	f[h+"power1_cap_max"] = "300000000\n"
	f[h+"power1_label"] = "PPT\n"
	f[h+"freq1_input"] = "1700000000\n"
	f[h+"freq1_label"] = "sclk\n"
	f[h+"freq2_input"] = "1600000000\n"
	f[h+"freq2_label"] = "mclk\n"
	f[h+"in0_input"] = "806\n"
	f["dev/dri/renderD"+strconv.Itoa(render)] = ""
	return f
}

// hwmonOf is the hwmon directory amdCard made for card num.
func hwmonOf(num int) string {
	return "sys/class/drm/card" + strconv.Itoa(num) + "/device/hwmon/hwmon" + strconv.Itoa(num+3) + "/"
}

// otherCard adds an Intel integrated GPU (driver i915): not an AMD one.
func otherCard(f files, num int) files {
	d := "sys/class/drm/card" + strconv.Itoa(num) + "/device/"
	f[d+"uevent"] = "DRIVER=i915\nPCI_CLASS=30000\nPCI_SLOT_NAME=0000:00:02.0\n"
	f[d+"drm/renderD"+strconv.Itoa(128+num)+"/dev"] = "226:1\n"
	return f
}

// kfdNodes adds the KFD topology (drivers/gpu/drm/amd/amdkfd/
// kfd_topology.c): node 0 the CPU (gpu_id 0), then one node per GPU, with
// its gpu_id and drm_render_minor, in the order given.
func kfdNodes(f files, gpus ...[2]int) files {
	n := "sys/class/kfd/kfd/topology/nodes/"
	f[n+"0/gpu_id"] = "0\n"
	f[n+"0/name"] = "\n"
	f[n+"0/properties"] = "cpu_cores_count 64\nsimd_count 0\nmem_banks_count 1\ndrm_render_minor 0\n"
	for i, g := range gpus {
		d := n + strconv.Itoa(i+1) + "/"
		f[d+"gpu_id"] = strconv.Itoa(g[0]) + "\n"
		f[d+"name"] = "aldebaran\n"
		f[d+"properties"] = "cpu_cores_count 0\nsimd_count 416\nmem_banks_count 1\nvendor_id 4098\ndevice_id 29711\n" +
			"location_id 768\ndomain 0\ndrm_render_minor " + strconv.Itoa(g[1]) + "\nhive_id 0\nunique_id 3362338237480734931\n" +
			"gfx_target_version 90010\n"
	}
	return f
}

// kfdProc adds a process holding /dev/kfd (kfd_process.c's procfs files):
// vram_<gpu_id> in bytes for each GPU it allocated on, sdma_<gpu_id>, pasid.
func kfdProc(f files, pid int, vram map[int]uint64) files {
	d := "sys/class/kfd/kfd/proc/" + strconv.Itoa(pid) + "/"
	f[d+"pasid"] = "32770\n"
	for id, v := range vram {
		f[d+"vram_"+strconv.Itoa(id)] = strconv.FormatUint(v, 10) + "\n"
		f[d+"sdma_"+strconv.Itoa(id)] = "0\n"
		f[d+"stats_"+strconv.Itoa(id)+"/evicted_ms"] = "0\n"
	}
	return f
}

// fakeTree is a ProcessTree of fixed pids.
type fakeTree []int

func (f fakeTree) PIDs(context.Context) ([]int, error) { return f, nil }
func (f fakeTree) Close() error                        { return nil }
func (f fakeTree) NoteGPUHolders(string, []int)        {}

// holderTree is a fakeTree that keeps the last GPU holders noted.
type holderTree struct {
	fakeTree
	holders []int
}

func (h *holderTree) NoteGPUHolders(_ string, pids []int) { h.holders = pids }

// apuCard adds card<num>, an APU's integrated GPU (a Radeon 780M, gfx1103)
// as amdgpu lays it out: a small VRAM carve-out and most of its memory in
// GTT, no mem_busy_percent, and an hwmon with only the shader clock
// (amdgpu_pm.c hides freq2_*, the memory clock, on APUs), socket power as
// power1_input and no power cap.
func apuCard(f files, num, render int, pci string) files {
	d := "sys/class/drm/card" + strconv.Itoa(num) + "/device/"
	f[d+"uevent"] = "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_ID=1002:15BF\nPCI_SUBSYS_ID=17AA:3881\nPCI_SLOT_NAME=" + pci + "\n"
	f[d+"vendor"] = "0x1002\n"
	f[d+"gpu_busy_percent"] = "23\n"
	f[d+"mem_info_vram_total"] = "536870912\n"
	f[d+"mem_info_vram_used"] = "314572800\n"
	f[d+"mem_info_vis_vram_total"] = "536870912\n"
	f[d+"mem_info_vis_vram_used"] = "314572800\n"
	f[d+"mem_info_gtt_total"] = "16791703552\n"
	f[d+"mem_info_gtt_used"] = "6442450944\n"
	f[d+"unique_id"] = "\n"
	f[d+"drm/card"+strconv.Itoa(num)+"/dev"] = "226:" + strconv.Itoa(num) + "\n"
	f[d+"drm/renderD"+strconv.Itoa(render)+"/dev"] = "226:" + strconv.Itoa(render) + "\n"
	h := d + "hwmon/hwmon" + strconv.Itoa(num+3) + "/"
	f[h+"name"] = "amdgpu\n"
	f[h+"temp1_input"] = "51000\n"
	f[h+"temp1_label"] = "edge\n"
	f[h+"power1_input"] = "18000000\n"
	f[h+"power1_label"] = "PPT\n"
	f[h+"freq1_input"] = "2700000000\n"
	f[h+"freq1_label"] = "sclk\n"
	f[h+"in0_input"] = "1050\n"
	f[h+"in0_label"] = "vddgfx\n"
	f[h+"in1_input"] = "750\n"
	f[h+"in1_label"] = "vddnb\n"
	f["sys/class/drm/renderD"+strconv.Itoa(render)+"/dev"] = "226:" + strconv.Itoa(render) + "\n"
	f["dev/dri/renderD"+strconv.Itoa(render)] = ""
	// KFD: one node, the APU's CPU cores and GPU together (its CRAT).
	n := "sys/class/kfd/kfd/topology/nodes/0/"
	f[n+"gpu_id"] = "2567\n"
	f[n+"name"] = "gfx1103\n"
	f[n+"properties"] = "cpu_cores_count 16\nsimd_count 24\nmem_banks_count 1\nvendor_id 4098\ndevice_id 5567\n" +
		"location_id 50176\ndomain 0\ndrm_render_minor " + strconv.Itoa(render) + "\ngfx_target_version 110003\n"
	return f
}

// mi300Card adds card<num> as amdCard does, an MI300X at pci (bus:dev.0)
// whose render node is renderD<render>, and the amdgpu_xcp platform devices
// amdgpu_xcp_drv.c registers for its other partitions (xcp 1..7):
// devices/platform/amdgpu_xcp_<first+i>, each with a DRM card and render
// node (card<num+1+i>, renderD<render+1+i>) whose device is that platform
// device: no PCI device, a uevent without DRIVER. It returns the links
// the sysfs tree has (path -> target), for links.
func mi300Card(f files, num, render int, pci string, first int) (files, map[string]string) {
	amdCard(f, num, render, pci, "")
	f["sys/class/drm/card"+strconv.Itoa(num)+"/device/product_name"] = "AMD Instinct MI300X\n"
	ln := map[string]string{}
	for i := range 7 {
		xcp := "amdgpu_xcp_" + strconv.Itoa(first+i)
		p := "sys/devices/platform/" + xcp + "/"
		cardN, rend := "card"+strconv.Itoa(num+1+i), "renderD"+strconv.Itoa(render+1+i)
		f[p+"uevent"] = "MODALIAS=platform:" + xcp + "\n"
		f[p+"modalias"] = "platform:" + xcp + "\n"
		f[p+"drm/"+cardN+"/dev"] = "226:" + strconv.Itoa(num+1+i) + "\n"
		f[p+"drm/"+rend+"/dev"] = "226:" + strconv.Itoa(render+1+i) + "\n"
		ln["sys/class/drm/"+cardN] = "../../devices/platform/" + xcp + "/drm/" + cardN
		ln["sys/class/drm/"+rend] = "../../devices/platform/" + xcp + "/drm/" + rend
		ln["sys/devices/platform/"+xcp+"/drm/"+cardN+"/device"] = "../../../" + xcp
		ln["sys/devices/platform/"+xcp+"/drm/"+rend+"/device"] = "../../../" + xcp
		f["dev/dri/"+rend] = ""
	}
	return f, ln
}

// links makes each symbolic link of ln (path under root -> target).
func links(t testing.TB, root string, ln map[string]string) {
	t.Helper()
	for rel, target := range ln {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
}

// kfdNodeFixture is one GPU node of a KFD topology fixture: its gpu_id, render
// minor, and the PCI location kfd_topology.c gives it (a partition's is
// its card's, with the partition's number ORed in).
type kfdNodeFixture struct {
	gpuID, render    int
	domain, location int
}

// kfdPartitionNodes adds the KFD topology of nodes: node 0 the CPU, then
// one per fixture node in the order given, with domain and location_id
// (an MI300X's properties, kfd_topology.c's names).
func kfdPartitionNodes(f files, nodes ...kfdNodeFixture) files {
	n := "sys/class/kfd/kfd/topology/nodes/"
	f[n+"0/gpu_id"] = "0\n"
	f[n+"0/properties"] = "cpu_cores_count 48\nsimd_count 0\nmem_banks_count 1\nlocation_id 0\ndomain 0\ndrm_render_minor 0\n"
	for i, k := range nodes {
		d := n + strconv.Itoa(i+1) + "/"
		f[d+"gpu_id"] = strconv.Itoa(k.gpuID) + "\n"
		f[d+"name"] = "\n"
		f[d+"properties"] = "cpu_cores_count 0\nsimd_count 152\nmem_banks_count 1\ngfx_target_version 90402\nvendor_id 4098\n" +
			"device_id 29857\nlocation_id " + strconv.Itoa(k.location) + "\ndomain " + strconv.Itoa(k.domain) +
			"\ndrm_render_minor " + strconv.Itoa(k.render) + "\nhive_id 0\nnum_xcc 1\n"
	}
	return f
}
