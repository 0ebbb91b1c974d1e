<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of OCP (stable31), only what the app uses.
 */

namespace OCP\Share;

use OCP\Files\Node;

interface IShare {
	public const TYPE_USER = 0;
	public const TYPE_GROUP = 1;
	public const TYPE_LINK = 3;

	public function getId();

	public function setNode(Node $node);

	public function getNode();

	public function setShareType($shareType);

	public function getShareType();

	public function setSharedWith($sharedWith);

	public function getSharedWith();

	public function setPermissions($permissions);

	public function getPermissions();

	public function setNote($note);

	public function getNote();

	public function setExpirationDate(?\DateTime $expireDate);

	public function getExpirationDate();

	public function setLabel($label);

	public function getLabel();

	public function setSharedBy($sharedBy);

	public function getSharedBy();

	public function setShareOwner($shareOwner);

	public function getShareOwner();

	public function setPassword($password);

	public function getPassword();

	public function setToken($token);

	public function getToken();
}
