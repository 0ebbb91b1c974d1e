/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Entry of js/istota-personal-settings.mjs, loaded by the personal settings template.
 */
import { createApp } from 'vue'
import PersonalSettings from './views/PersonalSettings.vue'
import './styles.css'

const el = document.getElementById('istota-personal-settings')
if (el) {
	createApp(PersonalSettings).mount(el)
}
