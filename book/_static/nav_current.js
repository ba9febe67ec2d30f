// The navigation drawer (a phone's menu button) opens with the current chapter in view. The theme
// scrolls the sidebar to the current chapter on load only where the sidebar is on screen, and on
// opening the drawer it focuses the drawer's first link, which scrolls the list back to the top:
// from chapter 06 on, the current chapter was below the fold (chapter 32 about 2,400 px down).
document.addEventListener("DOMContentLoaded", () => {
  const toggles = document.querySelectorAll(".primary-toggle");
  const checkbox = document.getElementById("pst-primary-sidebar-checkbox");
  const drawer = document.querySelector(".bd-sidebar-primary");
  if (!toggles.length || !checkbox || !drawer) return;
  const current = () => {
    const links = drawer.querySelectorAll("nav a.current, nav li.current > a");
    return links[links.length - 1] || null;
  };
  const scroller = (el) => {
    for (let node = el.parentElement; node && node !== document.body; node = node.parentElement) {
      const overflow = getComputedStyle(node).overflowY;
      if ((overflow === "auto" || overflow === "scroll") && node.scrollHeight > node.clientHeight) return node;
    }
    return null;
  };
  const reveal = () => {
    const link = current();
    // From 992 px up the same button hides the sidebar (checked = hidden); below, it opens the drawer.
    const drawerOpen = checkbox.checked && window.matchMedia("(max-width: 991.98px)").matches;
    if (!drawerOpen || !link) return;
    const box = scroller(link);
    if (!box) return;
    const linkBox = link.getBoundingClientRect(), boxBox = box.getBoundingClientRect();
    if (linkBox.top >= boxBox.top && linkBox.bottom <= boxBox.bottom) return;
    // A third of the way down, so the chapters just before it show too.
    box.scrollTop += linkBox.top - boxBox.top - box.clientHeight / 3;
    link.focus({ preventScroll: true });
  };
  // After the theme's own click handler and its 100 ms focus of the first link.
  toggles.forEach((toggle) => toggle.addEventListener("click", () => setTimeout(reveal, 150)));
});
