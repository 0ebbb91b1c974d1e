/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Layout checks and screenshots shared by the browser tests against the harness
 * (settings.test.mjs) and against a real Nextcloud (nextcloud-pages.mjs).
 */

/**
 * layoutProblems lists what of the app's section runs past the right edge of
 * Nextcloud's content area at the page's current width: the page or the content area
 * scrolling sideways, any element of the section ending right of the content area's
 * inner edge (a vertical scrollbar excluded), and any scroll box of the section (the
 * tables' wrappers) that needs its horizontal scrollbar. Elements inside a box that
 * clips them (a clamped cell, a scroll box) are not measured themselves: the box is.
 *
 * @param {import('playwright-core').Page} page the page
 * @param {object} o where to look
 * @param {string} o.root selector of the app's mount point
 * @param {string} [o.container] selector of Nextcloud's content area
 * @return {Promise<string[]>} one sentence per problem; empty when it fits
 */
export function layoutProblems(page, { root, container = '#app-content' }) {
	return page.evaluate(({ root, container }) => {
		const problems = []
		const describe = (el) => {
			const test = el.getAttribute('data-test')
			const cls = typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).join('.') : ''
			const text = (el.innerText || el.value || '').replace(/\s+/g, ' ').trim().slice(0, 60)
			return `<${el.tagName.toLowerCase()}${test ? ` data-test="${test}"` : ''}${cls}> "${text}"`
		}
		const page = document.scrollingElement
		if (page.scrollWidth > page.clientWidth) {
			problems.push(`the page scrolls sideways: ${page.scrollWidth} px wide in a ${page.clientWidth} px window`)
		}
		const box = document.querySelector(container)
		const app = document.querySelector(root)
		if (!box || !app) {
			return [...problems, `the page has no ${box ? root : container}`]
		}
		if (box.scrollWidth > box.clientWidth + 1) {
			problems.push(`${container} scrolls sideways: ${box.scrollWidth} px of content in ${box.clientWidth} px`)
		}
		const rect = box.getBoundingClientRect()
		const edge = rect.left + box.clientLeft + box.clientWidth
		const clips = (el) => getComputedStyle(el).overflowX !== 'visible'
		const clipped = (el) => {
			for (let p = el.parentElement; p && p !== app; p = p.parentElement) {
				if (clips(p)) {
					return true
				}
			}
			return false
		}
		for (const el of app.querySelectorAll('*')) {
			const r = el.getBoundingClientRect()
			// Empty, hidden and visually hidden (screen-reader only) elements take no room.
			if (r.width <= 1 || r.height <= 1 || clipped(el)) {
				continue
			}
			if (r.right > edge + 0.5) {
				problems.push(`${describe(el)} ends at ${Math.round(r.right)} px, right of the content area's edge at ${Math.round(edge)} px`)
			}
			if (clips(el) && !['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)
				&& ['auto', 'scroll'].includes(getComputedStyle(el).overflowX) && el.scrollWidth > el.clientWidth + 1) {
				problems.push(`${describe(el)} needs a horizontal scrollbar: ${el.scrollWidth} px of content in ${el.clientWidth} px`)
			}
		}
		return problems.slice(0, 20)
	}, { root, container })
}

/**
 * screenshotAll saves the whole page, also when Nextcloud scrolls its content area
 * inside a window-high layout (a plain full-page screenshot would stop at the window):
 * the window is made as tall as the content for the picture, then set back.
 *
 * @param {import('playwright-core').Page} page the page
 * @param {string} path where the PNG goes
 * @param {string} [container] selector of the element that scrolls the content
 */
export async function screenshotAll(page, path, container = '#app-content') {
	const before = page.viewportSize()
	const need = await page.evaluate((sel) => {
		const el = document.querySelector(sel)
		return el ? Math.ceil(window.innerHeight - el.clientHeight + el.scrollHeight) : window.innerHeight
	}, container)
	const height = Math.min(Math.max(need, before.height), 16000)
	if (height !== before.height) {
		await page.setViewportSize({ width: before.width, height })
	}
	try {
		await page.screenshot({ path, fullPage: true })
	} finally {
		if (height !== before.height) {
			await page.setViewportSize(before)
		}
	}
}
