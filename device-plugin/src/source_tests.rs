use super::*;

#[test]
fn a_mig_repartition_or_a_new_inventory_file_is_watched() {
    let opts = DiscoverOptions::for_root(Path::new("/driver-root"));
    assert_eq!(
        device_files(&InventoryFrom::Discover(opts), [0, 3]),
        [
            PathBuf::from("/driver-root/proc/driver/nvidia/capabilities/gpu0/mig"),
            PathBuf::from("/driver-root/proc/driver/nvidia/capabilities/gpu3/mig"),
        ]
    );
    let file = PathBuf::from("/run/inv.json");
    assert_eq!(
        device_files(&InventoryFrom::File(file.clone()), [0]),
        [file]
    );
}
