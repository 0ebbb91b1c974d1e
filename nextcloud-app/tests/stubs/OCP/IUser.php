<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IUser {
	public function getUID();

	public function getDisplayName();

	/**
	 * @return bool
	 * @throws \InvalidArgumentException
	 */
	public function setDisplayName($displayName);

	/** @return bool */
	public function setPassword($password, $recoveryPassword = null);

	/** @return bool */
	public function canChangePassword();

	/** @return bool */
	public function canChangeDisplayName();

	/** @return bool */
	public function isEnabled();

	/** @return string|null */
	public function getEMailAddress();
}
