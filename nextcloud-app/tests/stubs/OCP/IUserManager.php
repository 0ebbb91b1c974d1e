<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IUserManager {
	/** @return \OCP\IUser|null */
	public function get($uid);

	/** @return bool */
	public function userExists($uid);

	/** @return \OCP\IUser|false */
	public function checkPassword($loginName, $password);

	/**
	 * @throws \InvalidArgumentException
	 * @return false|\OCP\IUser
	 */
	public function createUser($uid, $password);

	public function callForAllUsers(\Closure $callback, $search = '');
}
