/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The Memory section's state: USER.md with conflict detection, the curation audit,
 * CHANNEL.md files, dated memories, knowledge facts and search.
 */
import { reactive } from 'vue'
import * as personalApi from '../api/personal.js'

/** Largest USER.md the sidecar accepts (64 KiB, in UTF-8 bytes). */
export const USER_MD_MAX_BYTES = 64 * 1024

/**
 * createMemoryStore makes the store.
 *
 * @param {object} [api] the personal API module
 * @return {object} state and actions
 */
export function createMemoryStore(api = personalApi) {
	const state = reactive({
		user: { loaded: false, content: '', draft: '', etag: '', saving: false, saved: false, error: null, conflict: null },
		audit: { loaded: false, entries: [], error: null },
		channels: { loaded: false, list: [], error: null },
		dated: { loaded: false, days: [], error: null },
		facts: { loaded: false, list: [], error: null, busy: {} },
		search: { query: '', results: [], searched: false, searching: false, error: null },
	})

	/** dirty tells whether the editor holds unsaved changes. */
	const dirty = () => state.user.draft !== state.user.content

	async function loadUser() {
		try {
			const res = await api.getUserMemory()
			state.user.content = res.content || ''
			state.user.draft = state.user.content
			state.user.etag = res.etag || ''
			state.user.conflict = null
			state.user.error = null
			state.user.saved = false
			state.user.loaded = true
		} catch (err) {
			state.user.error = err
		}
	}

	/**
	 * saveUser writes the draft. A 409 leaves the draft alone and sets `conflict` so the
	 * page can offer to reload the file or to overwrite it with the draft.
	 *
	 * @param {object} [o] options
	 * @param {boolean} [o.overwrite] save over the version that caused the conflict
	 */
	async function saveUser({ overwrite = false } = {}) {
		const u = state.user
		if (new TextEncoder().encode(u.draft).length > USER_MD_MAX_BYTES) {
			u.error = { code: 'too_large', message: '' }
			return
		}
		const etag = overwrite && u.conflict ? u.conflict.currentEtag : u.etag
		u.saving = true
		u.saved = false
		u.error = null
		try {
			const res = await api.putUserMemory(u.draft, etag)
			u.etag = res.etag || ''
			u.content = u.draft
			u.conflict = null
			u.saved = true
		} catch (err) {
			if (err.code === 'conflict') {
				u.conflict = { currentEtag: err.currentEtag || '', message: err.message }
			} else {
				u.error = err
			}
		} finally {
			u.saving = false
		}
	}

	async function loadAudit(limit = 50) {
		try {
			state.audit.entries = (await api.getAudit(limit)).entries || []
			state.audit.error = null
			state.audit.loaded = true
		} catch (err) {
			state.audit.error = err
		}
	}

	async function loadChannels() {
		try {
			state.channels.list = (await api.getChannels()).channels || []
			state.channels.error = null
			state.channels.loaded = true
		} catch (err) {
			state.channels.error = err
		}
	}

	async function loadDated(days = 30) {
		try {
			state.dated.days = (await api.getDated(days)).days || []
			state.dated.error = null
			state.dated.loaded = true
		} catch (err) {
			state.dated.error = err
		}
	}

	async function loadFacts() {
		try {
			state.facts.list = (await api.getFacts()).facts || []
			state.facts.error = null
			state.facts.loaded = true
		} catch (err) {
			state.facts.error = err
		}
	}

	async function factAction(id, action) {
		state.facts.busy[id] = true
		try {
			await (action === 'delete' ? api.deleteFact(id) : api.invalidateFact(id))
			state.facts.error = null
			await loadFacts()
		} catch (err) {
			state.facts.error = err
		} finally {
			delete state.facts.busy[id]
		}
	}

	/** @param {number} id the fact to mark as no longer true */
	const invalidateFact = (id) => factAction(id, 'invalidate')
	/** @param {number} id the fact to forget */
	const deleteFact = (id) => factAction(id, 'delete')

	async function search(limit = 20) {
		const q = state.search.query.trim()
		if (!q) {
			state.search.results = []
			state.search.searched = false
			return
		}
		state.search.searching = true
		try {
			state.search.results = (await api.searchMemory(q, limit)).results || []
			state.search.error = null
			state.search.searched = true
		} catch (err) {
			state.search.error = err
		} finally {
			state.search.searching = false
		}
	}

	/** loadAll fills every part; each part shows its own error. */
	const loadAll = () => Promise.all([loadUser(), loadAudit(), loadChannels(), loadDated(), loadFacts()])

	return { state, dirty, loadUser, saveUser, loadAudit, loadChannels, loadDated, loadFacts, invalidateFact, deleteFact, search, loadAll }
}
